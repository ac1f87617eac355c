"""One batch type for every model sigprop measures: :class:`Batch`, built once from whatever the caller holds.

A caller may hold sigprop's dict (:func:`sigprop.model.objective.make_batch`: ``inputs``, ``labels``,
``padding_mask``, …), a Hugging Face dict (``input_ids``, ``attention_mask``, ``labels``, ``token_type_ids``,
``pixel_values``, a tokenizer's or a data collator's output) or a bare tensor of token ids. :meth:`Batch.from_any`
turns each into the same frozen dataclass, validated in one place, and the rest of the measurement reads fields, not
keys.

Labels are kept in sigprop's convention: ``labels[b, t]`` is the target of the model's output at position t, with
``IGNORE_INDEX`` (−100) where there is none. A Hugging Face causal LM's labels are *unshifted* (the model shifts them
inside its loss: ``labels[b, t]`` is the token at t, scored against the output at t − 1); :meth:`Batch.from_any`
with ``causal=True`` shifts them once, and :meth:`Batch.hf_kwargs` shifts them back, so that the model's own loss on
:meth:`Batch.hf_kwargs` is the loss sigprop's objective gives on the batch. Masked-LM and classification labels are
aligned in both conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from ..data.mlm import IGNORE_INDEX

__all__ = ["Batch", "SIGPROP_KEYS", "HF_KEYS", "shift_causal_labels", "unshift_causal_labels"]

#: The keys of sigprop's batch dict (:func:`sigprop.model.objective.make_batch`), the fields of :class:`Batch`.
SIGPROP_KEYS = ("inputs", "labels", "padding_mask", "segment_ids", "decoder_inputs", "decoder_padding_mask")
#: Hugging Face batch keys → the :class:`Batch` field each becomes.
HF_KEYS = {"input_ids": "inputs", "pixel_values": "inputs", "attention_mask": "padding_mask", "labels": "labels",
           "token_type_ids": "segment_ids", "decoder_input_ids": "decoder_inputs",
           "decoder_attention_mask": "decoder_padding_mask"}


def shift_causal_labels(hf_labels: torch.Tensor) -> torch.Tensor:
    """A Hugging Face causal LM's unshifted labels in sigprop's convention: ``out[:, t] = hf_labels[:, t + 1]``,
    −100 at the last position (nothing follows it)."""
    out = torch.full_like(hf_labels, IGNORE_INDEX)
    out[..., :-1] = hf_labels[..., 1:]
    return out


def unshift_causal_labels(labels: torch.Tensor) -> torch.Tensor:
    """The inverse of :func:`shift_causal_labels`: ``out[:, t + 1] = labels[:, t]``, −100 at position 0 (which a
    causal LM's loss never reads)."""
    out = torch.full_like(labels, IGNORE_INDEX)
    out[..., 1:] = labels[..., :-1]
    return out


def _tensor(value: object, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"batch field {name!r} must be a torch tensor (got {type(value).__name__})")
    return value


def _integer(value: object, name: str, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    t = _tensor(value, name)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(f"batch field {name!r} must hold integers (got dtype {t.dtype})")
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"batch field {name!r} must have shape {shape} (got {tuple(t.shape)})")
    return t


def _mask(value: object, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """A padding mask as bool, True = real token: a bool tensor, or a Hugging Face 0/1 integer ``attention_mask``."""
    t = _tensor(value, name)
    if tuple(t.shape) != shape:
        raise ValueError(f"batch field {name!r} must have the shape of its tokens {shape} (got {tuple(t.shape)})")
    if t.dtype != torch.bool:
        if t.dtype.is_complex or bool(((t != 0) & (t != 1)).any()):
            raise ValueError(f"batch field {name!r} must be a bool or 0/1 mask, True (1) = real token")
        t = t != 0
    if not bool(t.any(-1).all()):
        raise ValueError(f"batch field {name!r}: a sequence has no real token")
    return t


@dataclass(frozen=True)
class Batch:
    """The inputs and targets of one batch, whatever model they are for.

    What :func:`sigprop.measure`, :class:`sigprop.Monitor` and the model adapters read: sigprop's batch dict
    (:func:`sigprop.make_batch`), a Hugging Face dict or a tensor of token ids, turned once into this frozen,
    validated dataclass by :meth:`from_any`. Labels are in sigprop's convention, ``labels[b, t]`` the target of
    the output at position t (module docstring): a Hugging Face causal LM's unshifted labels are shifted once
    (``from_any(..., causal=True)``) and back by :meth:`hf_kwargs`.

    Attributes:
        inputs: token ids (batch, length), integer, or images (batch, channels, height, width), float.
        labels: targets in sigprop's convention (module docstring), ``IGNORE_INDEX`` where there is none: the shape
            of the tokens a loss is taken over (of ``decoder_inputs`` for an encoder–decoder), or (batch,) classes.
        padding_mask: bool (batch, length), True = real token; ``None``: every token is real.
        segment_ids: BERT's token types, the shape of ``inputs``.
        decoder_inputs: an encoder–decoder's decoder token ids.
        decoder_padding_mask: their padding mask.

    Raises:
        ValueError: a field of the wrong type, dtype or shape (named), a padding mask that is not bool or 0/1 or
            leaves a sequence without a real token, or padding and segments given for images.

    Example:
        >>> import torch, sigprop
        >>> b = sigprop.Batch.from_any({"input_ids": torch.tensor([[5, 6, 7, 0]]),
        ...                             "attention_mask": torch.tensor([[1, 1, 1, 0]])})
        >>> b.padding_mask.tolist(), b.tokens
        ([[True, True, True, False]], 3)
        >>> sigprop.Batch(torch.tensor([[5, 6]]), labels=torch.tensor([1, 2, 3]))
        Traceback (most recent call last):
        ...
        ValueError: batch field 'labels' must have shape (1, 2) (got (3,))
    """

    inputs: torch.Tensor
    labels: torch.Tensor | None = None
    padding_mask: torch.Tensor | None = None
    segment_ids: torch.Tensor | None = None
    decoder_inputs: torch.Tensor | None = None
    decoder_padding_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        x = _tensor(self.inputs, "inputs")
        if x.dtype.is_floating_point:
            if x.dim() != 4:
                raise ValueError(f"batch field 'inputs': images must have shape (batch, channels, height, width) "
                                 f"(got {tuple(x.shape)})")
            if self.padding_mask is not None or self.segment_ids is not None:
                raise ValueError("batch of images: padding_mask and segment_ids apply to tokens only")
        else:
            _integer(x, "inputs")
            if x.dim() != 2 or x.numel() == 0:
                raise ValueError(f"batch field 'inputs': token ids must have shape (batch, length) "
                                 f"(got {tuple(x.shape)})")
            if self.padding_mask is not None:
                object.__setattr__(self, "padding_mask", _mask(self.padding_mask, "padding_mask", tuple(x.shape)))
            if self.segment_ids is not None:
                _integer(self.segment_ids, "segment_ids", tuple(x.shape))
        if self.decoder_inputs is not None:
            dec = _integer(self.decoder_inputs, "decoder_inputs")
            if dec.dim() != 2 or dec.shape[0] != x.shape[0]:
                raise ValueError(f"batch field 'decoder_inputs' must have shape ({x.shape[0]}, length) "
                                 f"(got {tuple(dec.shape)})")
            if self.decoder_padding_mask is not None:
                object.__setattr__(self, "decoder_padding_mask",
                                   _mask(self.decoder_padding_mask, "decoder_padding_mask", tuple(dec.shape)))
        elif self.decoder_padding_mask is not None:
            raise ValueError("batch field 'decoder_padding_mask' needs 'decoder_inputs'")
        if self.labels is not None:
            target = self.decoder_inputs if self.decoder_inputs is not None else x
            shape = (x.shape[0],) if x.dtype.is_floating_point else tuple(target.shape)
            labels = _integer(self.labels, "labels")
            if tuple(labels.shape) not in (shape, (x.shape[0],)):
                seq2seq = " (a sequence-to-sequence batch needs its decoder_input_ids)" if (
                    self.decoder_inputs is None and labels.dim() == 2 and labels.shape[0] == x.shape[0]) else ""
                raise ValueError(f"batch field 'labels' must have shape {shape} (got {tuple(labels.shape)})"
                                 + seq2seq)

    # -- what it holds ----------------------------------------------------------------------------------------------
    @property
    def is_images(self) -> bool:
        """Whether the inputs are images (a float tensor) rather than token ids."""
        return self.inputs.dtype.is_floating_point

    @property
    def sequences(self) -> int:
        """The number of examples in the batch."""
        return int(self.inputs.shape[0])

    @property
    def tokens(self) -> int:
        """Real (non-padding) input tokens; for images, the number of images."""
        if self.is_images:
            return self.sequences
        return int(self.inputs.numel() if self.padding_mask is None else self.padding_mask.sum())

    # -- conversions ------------------------------------------------------------------------------------------------
    @classmethod
    def from_any(cls, batch: Batch | Mapping[str, Any] | torch.Tensor, causal: bool = False) -> Batch:
        """The :class:`Batch` of ``batch``: a :class:`Batch`, sigprop's dict, a Hugging Face dict or a tensor of token
        ids (batch, length) (a 1-D tensor is one sequence).

        Args:
            batch: the batch as the caller holds it.
            causal: whether it is for a causal LM; a Hugging Face dict's ``labels`` are then unshifted and are
                shifted into sigprop's convention (module docstring).

        Returns:
            The validated batch.

        Raises:
            ValueError: a dict with neither sigprop's nor Hugging Face's keys (the message lists both), one with
                keys beside those it is read from (named), or fields of the wrong type or shape.

        Example:
            >>> import torch
            >>> Batch.from_any({"input_ids": torch.tensor([[5, 6, 7]]), "labels": torch.tensor([[5, 6, 7]])},
            ...                causal=True).labels.tolist()
            [[6, 7, -100]]
        """
        if isinstance(batch, Batch):
            return batch
        if isinstance(batch, torch.Tensor):
            return cls(inputs=batch[None] if batch.dim() == 1 else batch)
        if not isinstance(batch, Mapping):
            raise ValueError(f"a batch is a tensor of token ids, a dict or a sigprop Batch "
                             f"(got {type(batch).__name__})")
        keys = set(batch)
        if "inputs" in keys:
            unknown = keys - set(SIGPROP_KEYS)
            if unknown:
                raise ValueError(f"a sigprop batch has the keys {', '.join(SIGPROP_KEYS)}; unknown: "
                                 f"{', '.join(sorted(map(str, unknown)))}")
            return cls(**{k: batch[k] for k in SIGPROP_KEYS if batch.get(k) is not None})
        if "input_ids" in keys or "pixel_values" in keys:
            unknown = keys - set(HF_KEYS)
            if unknown:
                raise ValueError(f"a Hugging Face batch is read from the keys {', '.join(HF_KEYS)}; unknown: "
                                 f"{', '.join(sorted(map(str, unknown)))} (pass loss_fn(model, batch) to give the "
                                 "model keys of its own)")
            known = {k: batch[k] for k in HF_KEYS if batch.get(k) is not None}
            if "input_ids" in known and "pixel_values" in known:
                raise ValueError("a batch holds either input_ids or pixel_values, not both")
            if "input_ids" in known:
                _integer(known["input_ids"], "input_ids")
            elif not _tensor(known["pixel_values"], "pixel_values").dtype.is_floating_point:
                raise ValueError("batch field 'pixel_values' must hold floats (images)")
            out = cls(**{HF_KEYS[k]: v for k, v in known.items()})
            if causal and out.labels is not None and not out.is_images and out.labels.shape == out.inputs.shape:
                out = replace(out, labels=shift_causal_labels(out.labels))
            return out
        raise ValueError(f"the batch has none of the known keys (got {', '.join(sorted(map(str, keys))) or 'none'}): "
                         f"sigprop's {', '.join(SIGPROP_KEYS)} (with 'inputs'), or Hugging Face's "
                         f"{', '.join(HF_KEYS)} (with 'input_ids' or 'pixel_values')")

    def to_dict(self) -> dict:
        """sigprop's batch dict (:func:`sigprop.model.objective.make_batch`'s keys; the fields that are set)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def hf_kwargs(self, causal: bool = False, labels: bool = True) -> dict:
        """The keyword arguments of a Hugging Face model's ``forward`` for this batch: ``input_ids`` or
        ``pixel_values``, ``attention_mask`` (0/1 integers), ``token_type_ids``, the decoder's, and with ``labels``
        the labels in Hugging Face's convention (unshifted for a ``causal`` LM)."""
        out = {"pixel_values" if self.is_images else "input_ids": self.inputs}
        if self.padding_mask is not None:
            out["attention_mask"] = self.padding_mask.long()
        if self.segment_ids is not None:
            out["token_type_ids"] = self.segment_ids
        if self.decoder_inputs is not None:
            out["decoder_input_ids"] = self.decoder_inputs
        if self.decoder_padding_mask is not None:
            out["decoder_attention_mask"] = self.decoder_padding_mask.long()
        if labels and self.labels is not None:
            out["labels"] = unshift_causal_labels(self.labels) if causal and not self.is_images else self.labels
        return out

    def with_labels(self, labels: torch.Tensor) -> Batch:
        """This batch with ``labels`` (sigprop's convention)."""
        return replace(self, labels=labels)

    def to(self, device: torch.device | str | None, non_blocking: bool = False) -> Batch:
        """This batch with every tensor on ``device``.

        Args:
            device: a torch device (or its name).
            non_blocking: passed to :meth:`torch.Tensor.to`.

        Returns:
            The moved batch (this one where every tensor is there already).

        Example:
            >>> import torch
            >>> Batch(torch.tensor([[5, 6]])).to("cpu").inputs.device.type
            'cpu'
        """
        return replace(self, **{name: t.to(device, non_blocking=non_blocking) for name, t in self.to_dict().items()})

    def rows(self, start: int, stop: int) -> Batch:
        """Examples ``start`` to ``stop`` (excluded) of this batch: the same rows of every tensor.

        Args:
            start: the first example.
            stop: one past the last.

        Returns:
            The smaller batch.

        Example:
            >>> import torch
            >>> Batch(torch.tensor([[5, 6], [7, 8]])).rows(1, 2).inputs.tolist()
            [[7, 8]]
        """
        return replace(self, **{name: t[start:stop] for name, t in self.to_dict().items()})
