"""Any model measured through sigprop: its sites, what its head trains, and its loss on a
:class:`~sigprop.model.batch.Batch`.

One table, :data:`HF_HEADS`, says what a Hugging Face model's head trains from the ending of its class name (as
Hugging Face names its task classes); nothing asks for a ``model_type``. Everything else is read from the model:

* **sites**: a sigprop model's ``sites()``; any other model's from its block stacks
  (:func:`sigprop.measurement.discover.discover_sites`);
* **loss**: the model's own when it returns one (a Hugging Face model given ``labels``: ``outputs.loss``, with the
  labels shifted back into its convention, :meth:`~sigprop.model.batch.Batch.hf_kwargs`), else the objective of its
  head on its logits: the next token for a causal LM (labels derived from the ids, padding excluded, when the batch
  has none), the masked tokens of a masked LM, the class of a classifier. A model that is not a Hugging Face model
  is called as ``model(inputs)``; logits of shape (batch, length, vocabulary) are scored as a causal LM, (batch,
  classes) as a classifier. ``loss_fn=`` overrides all of this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from ..data.mlm import IGNORE_INDEX, causal_lm_labels
from ..model.batch import Batch
from .discover import DiscoveredSites, InputOf, discover_sites

__all__ = ["Head", "ModelKind", "HF_HEADS", "ModelAdapter", "adapt", "is_hf_model", "head_of", "head_of_class"]

#: What a model's head is trained for; it decides how labels are read and which objective scores the logits.
Head = Literal["causal_lm", "masked_lm", "seq2seq_lm", "image_classification", "sequence_classification", "unknown"]

#: How a model is called: sigprop's site protocol (its own ``loss(batch)``, taking the batch as the caller gave it,
#: and its ``sites()`` where it has them: sigprop's models, a user's module written for the protocol), a Hugging Face
#: model (keyword arguments, its own ``outputs.loss``), or any other module (``model(inputs)``).
ModelKind = Literal["protocol", "hf", "module"]

#: A Hugging Face model class's name ending → its head (checked in this order; the first match wins).
HF_HEADS: tuple[tuple[str, Head], ...] = (
    ("ForCausalLM", "causal_lm"), ("LMHeadModel", "causal_lm"), ("ForMaskedLM", "masked_lm"),
    ("ForConditionalGeneration", "seq2seq_lm"), ("ForImageClassification", "image_classification"),
    ("ForSequenceClassification", "sequence_classification"),
)


def is_hf_model(model: object) -> bool:
    """A ``transformers`` model (an ``nn.Module`` with a Hugging Face ``config``), not a sigprop model."""
    cfg = getattr(model, "config", None)
    return (isinstance(model, nn.Module) and hasattr(cfg, "model_type") and hasattr(cfg, "to_dict")
            and not callable(getattr(model, "sites", None)))


def head_of_class(cls: type, encoder_decoder: bool = True) -> Head:
    """The head of a Hugging Face model class, from the ending of its name (:data:`HF_HEADS`); a
    ``…ForConditionalGeneration`` that is not an encoder–decoder (a vision-language model) is ``"unknown"``."""
    head: Head = next((head for ending, head in HF_HEADS if cls.__name__.endswith(ending)), "unknown")
    return "unknown" if head == "seq2seq_lm" and not encoder_decoder else head


def head_of(model: nn.Module) -> Head:
    """The head of a Hugging Face model (:data:`HF_HEADS`), ``"unknown"`` for any other model."""
    if not is_hf_model(model):
        return "unknown"
    return head_of_class(type(model), bool(getattr(model.config, "is_encoder_decoder", False)))


def _loss_of_a_batch(model: nn.Module) -> bool:
    """Whether ``model`` has the protocol's ``loss(batch)``: a method taking the batch alone (not a loss module held as
    an attribute, nor a ``loss(logits, targets)``)."""
    import inspect

    loss = getattr(model, "loss", None)
    if not callable(loss) or isinstance(loss, nn.Module):
        return False
    try:
        inspect.signature(loss).bind(None)
    except (TypeError, ValueError):
        return False
    return True


def _logits(outputs: object) -> torch.Tensor | None:
    if isinstance(outputs, torch.Tensor):
        return outputs
    logits = outputs.get("logits") if isinstance(outputs, Mapping) else getattr(outputs, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(outputs, tuple | list):
        return next((o for o in outputs if isinstance(o, torch.Tensor) and o.is_floating_point()), None)
    return None


def _head_objective(logits: torch.Tensor | None, batch: Batch, head: Head, model_name: str) -> torch.Tensor:
    """The objective of ``head`` on ``logits`` (module docstring); ``ValueError`` where it cannot be taken."""
    if logits is None:
        raise ValueError(f"{model_name} returns neither a loss nor logits: pass loss_fn(model, batch)")
    if logits.dim() == 2 and batch.labels is not None and batch.labels.dim() == 1:
        return F.cross_entropy(logits.float(), batch.labels)
    token_shape = tuple(batch.inputs.shape) if not batch.is_images else None
    if logits.dim() == 3 and token_shape is not None and tuple(logits.shape[:2]) == token_shape:
        labels = batch.labels
        if labels is None:
            if head not in ("causal_lm", "unknown"):
                raise ValueError(f"{model_name} is a {head.replace('_', ' ')}: its batch needs labels")
            labels = causal_lm_labels(batch.inputs, padding_mask=batch.padding_mask)
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                               ignore_index=IGNORE_INDEX)
    raise ValueError(f"{model_name}: no objective for logits of shape {tuple(logits.shape)} on this batch (token "
                     "logits (batch, length, vocabulary) or class logits (batch, classes) with labels (batch,)); "
                     "pass loss_fn(model, batch)")


@dataclass(frozen=True)
class ModelAdapter:
    """How sigprop measures one model: its sites, its head and its loss on a batch.

    Attributes:
        model: the model.
        kind: how it is called (:data:`ModelKind`).
        sites: ``(layer, site, module or InputOf)`` in recording order.
        head: what its head trains (:data:`Head`).
        decoder_from: the first decoder layer of an encoder–decoder (its sites take the decoder's padding mask).
        stacks: where the sites came from: ``"sites()"`` (the site protocol), ``"sites="`` (given), else the
            module paths of the block lists they were found in.
    """

    model: nn.Module
    kind: ModelKind
    sites: list[tuple[int, str, nn.Module | InputOf]]
    head: Head
    decoder_from: int | None
    stacks: tuple[str, ...]

    def batch(self, batch: Batch | Mapping[str, Any] | torch.Tensor, strict: bool = True) -> Batch | None:
        """``batch`` as a :class:`~sigprop.model.batch.Batch` for this model (Hugging Face labels of a causal LM, or
        of a module scored as one, shifted into sigprop's convention); ``None`` for a protocol model (its ``loss``
        takes the batch as the caller gave it) and, unless ``strict``, for one that is not a batch (a user's
        ``loss_fn`` reads it)."""
        if self.kind == "protocol":
            return None
        try:
            return Batch.from_any(batch, causal=self.head == "causal_lm" or self.kind == "module")
        except ValueError:
            if strict:
                raise
            return None

    def loss(self, batch: Any) -> torch.Tensor:
        """The model's loss on ``batch`` (module docstring): a scalar tensor. ``batch``: a
        :class:`~sigprop.model.batch.Batch`, or for a protocol model the batch as the caller gave it."""
        model, name = self.model, type(self.model).__name__
        if self.kind == "protocol":
            if not callable(getattr(model, "loss", None)):
                raise ValueError("model has no loss(batch) method: pass loss_fn(model, batch)")
            return cast(Any, model).loss(batch)  # a protocol model's own loss(batch)
        if self.kind == "hf":
            causal = self.head == "causal_lm"
            if batch.labels is None and causal and not batch.is_images:
                batch = batch.with_labels(causal_lm_labels(batch.inputs, padding_mask=batch.padding_mask))
            if batch.labels is None and self.head in ("masked_lm", "image_classification", "seq2seq_lm",
                                                      "sequence_classification"):
                raise ValueError(f"{name} is a {self.head.replace('_', ' ')}: its batch needs labels")
            outputs = model(**batch.hf_kwargs(causal=causal))
            loss = getattr(outputs, "loss", None)
            if isinstance(loss, torch.Tensor):
                return loss
            return _head_objective(_logits(outputs), batch, self.head, name)
        if batch.decoder_inputs is not None or batch.segment_ids is not None:
            raise ValueError(f"{name} is called as model(inputs): a batch with decoder inputs or segment ids needs "
                             "loss_fn(model, batch)")
        return _head_objective(_logits(model(batch.inputs)), batch, self.head, name)

    def masks(self, batch: object) -> torch.Tensor | dict[tuple[int, str], torch.Tensor | None] | None:
        """The padding masks of the sites: the batch's (a :class:`~sigprop.model.batch.Batch`'s fields, or a
        mapping's ``padding_mask``), and for an encoder–decoder the decoder's (``decoder_padding_mask``) at its
        sites; ``None`` for a batch of another form."""
        if isinstance(batch, Batch):
            enc, dec = batch.padding_mask, batch.decoder_padding_mask
        elif isinstance(batch, Mapping):  # a batch of its own form: sigprop's keys, else Hugging Face's
            enc = _as_mask(batch.get("padding_mask", batch.get("attention_mask")))
            dec = _as_mask(batch.get("decoder_padding_mask", batch.get("decoder_attention_mask")))
        else:
            return None
        if self.decoder_from is None:
            return enc
        return {(layer, site): (dec if layer >= self.decoder_from else enc) for layer, site, _ in self.sites}


def _as_mask(mask: object) -> torch.Tensor | None:
    """A padding mask as bool (True = real token): Hugging Face's 0/1 attention masks as they are given."""
    if not isinstance(mask, torch.Tensor):
        return None
    return mask if mask.dtype == torch.bool else mask != 0


def adapt(model: nn.Module, sites: Sequence[tuple[int, str, nn.Module | InputOf]] | None = None) -> ModelAdapter:
    """The :class:`ModelAdapter` of ``model``: sigprop's own sites and objective, or any other model's found from
    the model (module docstring).

    Args:
        model: a sigprop model, a Hugging Face model or any ``nn.Module`` with a stack of blocks.
        sites: ``(layer, site, module)`` tuples to use instead of the ones found.

    Returns:
        The adapter.

    Raises:
        ValueError: no stack of blocks found and no ``sites`` given.

    Example:
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Embedding(10, 4), nn.ModuleList([nn.Linear(4, 4) for _ in range(3)]))
        >>> adapter = adapt(net)
        >>> adapter.kind, adapter.stacks, len(adapter.sites)
        ('module', ('1',), 4)
    """
    hf = is_hf_model(model)
    protocol = not hf and (callable(getattr(model, "sites", None)) or _loss_of_a_batch(model))
    kind: ModelKind = "protocol" if protocol else "hf" if hf else "module"
    cfg: Any = getattr(model, "config", None)
    decoder_from = cfg.n_layers if kind == "protocol" and getattr(cfg, "arch", None) == "encoder_decoder" else None
    if sites is not None:
        found = DiscoveredSites(list(sites), ("sites=",), decoder_from)
    elif callable(getattr(model, "sites", None)):
        found = DiscoveredSites(list(cast(Any, model).sites()), ("sites()",), decoder_from)  # a protocol model's
    else:
        found = discover_sites(model)
    return ModelAdapter(model=model, kind=kind, sites=found.sites, head=head_of(model),
                        decoder_from=found.decoder_from, stacks=found.stacks)
