"""Language-modelling targets: BERT-style masked-LM corruption, and next-token labels for causal LM.

Kedia et al. pre-train BERT with masked language modelling (Sec. 4.1, following Devlin et al. 2019) and GPT-style
models with next-token prediction; these are the two objectives. Labels use -100 (``IGNORE_INDEX``) for positions
without a target, the default ``ignore_index`` of ``torch.nn.functional.cross_entropy``.
"""

from __future__ import annotations

import torch

__all__ = ["IGNORE_INDEX", "mask_tokens", "causal_lm_labels"]

#: Label of a position that has no target (``cross_entropy``'s default ``ignore_index``).
IGNORE_INDEX = -100


def _check_ids(ids) -> torch.Tensor:
    ids = torch.as_tensor(ids)
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"ids must be an integer tensor (got dtype {ids.dtype})")
    if ids.dim() < 1 or ids.numel() == 0:
        raise ValueError(f"ids must be a non-empty tensor of shape (..., length) (got shape {tuple(ids.shape)})")
    return ids.long()


def _check_id(value, name: str, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo} (got {value!r})")
    return value


def mask_tokens(ids, mask_id: int, prob: float = 0.15, generator: torch.Generator | None = None,
                pad_id: int | None = None, vocab_size: int | None = None, random_low: int = 0,
                padding_mask: torch.Tensor | None = None) -> tuple[torch.LongTensor, torch.LongTensor]:
    """BERT masked-LM corruption (Devlin et al. 2019, Sec. 3.1; used by Kedia et al. Sec. 4.1): returns
    ``(inputs, labels)``, both int64 of the shape of ``ids``.

    Each non-padding position is *selected* independently with probability ``prob``. A selected position gets
    label = its original id and input = ``mask_id`` with probability 0.8, a uniform random id in
    [``random_low``, ``vocab_size``) with probability 0.1 (it may equal the original), unchanged with probability 0.1.
    Every other position has label -100 and its input unchanged; padding (tokens ``pad_id``, or False in
    ``padding_mask``, a bool tensor of the shape of ``ids``, True = real token) is never selected.

    If no position of the whole batch is selected (probability (1 − prob)^n for n non-padding positions), one
    non-padding position chosen uniformly is selected, so that a loss always exists; this raises the selection rate
    by at most (1 − prob)^n / n. ``vocab_size`` defaults to max(ids.max(), mask_id) + 1. Randomness comes from
    ``generator`` (which must live on ``ids``' device) or torch's global generator.
    Raises ``ValueError`` for non-integer or empty ids, prob ∉ (0, 1], a batch that is all padding, or ids (or
    ``mask_id``) outside [0, vocab_size).
    """
    ids = _check_ids(ids)
    mask_id = _check_id(mask_id, "mask_id")
    if isinstance(prob, bool) or not isinstance(prob, int | float) or not 0.0 < prob <= 1.0:
        raise ValueError(f"prob must be in (0, 1] (got {prob!r})")
    if pad_id is not None:
        pad_id = _check_id(pad_id, "pad_id")
    if int(ids.min()) < 0:
        raise ValueError("ids must be non-negative")
    if vocab_size is None:
        vocab_size = max(int(ids.max()), mask_id) + 1
    vocab_size = _check_id(vocab_size, "vocab_size", 1)
    if int(ids.max()) >= vocab_size:
        raise ValueError(f"ids must be < vocab_size = {vocab_size} (got max id {int(ids.max())})")
    if mask_id >= vocab_size:  # it would be written into the inputs and fail only in the embedding lookup
        raise ValueError(f"mask_id must be < vocab_size = {vocab_size} (got {mask_id})")
    random_low = _check_id(random_low, "random_low")
    if random_low >= vocab_size:
        raise ValueError(f"random_low must be < vocab_size = {vocab_size} (got {random_low})")

    real = torch.ones_like(ids, dtype=torch.bool) if pad_id is None else ids != pad_id
    if padding_mask is not None:
        if tuple(padding_mask.shape) != tuple(ids.shape):
            raise ValueError(f"padding_mask must have the shape of ids {tuple(ids.shape)} "
                             f"(got {tuple(padding_mask.shape)})")
        real = real & padding_mask.to(device=ids.device, dtype=torch.bool)
    n_real = int(real.sum())
    if n_real == 0:
        raise ValueError("ids: every position is padding, nothing to mask")
    u = torch.rand(ids.shape, generator=generator, device=ids.device, dtype=torch.float64)
    selected = (u < prob) & real
    if not bool(selected.any()):
        k = int(torch.randint(0, n_real, (1,), generator=generator, device=ids.device))
        flat = real.reshape(-1).nonzero()[k]
        selected.view(-1)[flat] = True
    # One more uniform splits the selected positions 80 / 10 / 10.
    v = torch.rand(ids.shape, generator=generator, device=ids.device, dtype=torch.float64)
    to_mask = selected & (v < 0.8)
    to_random = selected & (v >= 0.8) & (v < 0.9)
    random_ids = torch.randint(random_low, vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, random_ids, inputs)
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))
    return inputs, labels


def causal_lm_labels(ids, pad_id: int | None = None, padding_mask: torch.Tensor | None = None) -> torch.LongTensor:
    """Next-token labels aligned with the positions of ``ids`` (..., L): labels[..., t] = ids[..., t+1], so that the
    logits at position t are scored against the token that follows. labels[..., L−1] = -100 (nothing follows), and
    so is every position whose input or target is padding (tokens ``pad_id``, or False in ``padding_mask``, a bool
    tensor of the shape of ``ids``, True = real token). int64, the shape of ``ids``.
    """
    ids = _check_ids(ids)
    if pad_id is not None:
        pad_id = _check_id(pad_id, "pad_id")
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[..., :-1] = ids[..., 1:]
    padded = None if pad_id is None else ids == pad_id
    if padding_mask is not None:
        padded = ~padding_mask.bool() if padded is None else padded | ~padding_mask.bool()
    if padded is not None:
        labels[padded] = IGNORE_INDEX
        labels[..., :-1][padded[..., 1:]] = IGNORE_INDEX
    return labels
