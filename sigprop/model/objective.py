"""Training objectives and the batches they need: masked-LM for encoders, next-token for decoders and
encoder–decoders, classification for patch models. A batch is a dict of tensors."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["make_batch", "objective_loss", "segment_halves", "MASK_ID", "PAD_ID", "N_SPECIAL"]

#: Ids of the special tokens in sigprop's tokenizer (:data:`sigprop.data.tokenizer.SPECIAL_TOKENS` order).
PAD_ID, MASK_ID = 0, 1
#: Number of special tokens (ids below it are never drawn as random replacements).
N_SPECIAL = 5


def segment_halves(inputs: torch.Tensor, n_segments: int) -> torch.Tensor:
    """Segment ids of BERT's sentence-pair input: the first half of every sequence is segment 0, the second
    segment 1 (or 0 for a single segment type)."""
    L = inputs.shape[-1]
    ids = (torch.arange(L, device=inputs.device) >= (L + 1) // 2).long().clamp(max=n_segments - 1)
    return ids.expand_as(inputs).clone()


def make_batch(config, inputs: torch.Tensor, generator: torch.Generator | None = None,
               padding_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> dict:
    """The batch dict for ``config``'s objective from raw ``inputs``.

    * encoder, tokens: BERT masking of ``config.mask_prob`` of the real tokens (labels −100 elsewhere);
    * decoder: next-token labels (the last position and padding get −100);
    * encoder–decoder: the inputs feed both sides (a denoising/copy objective: the encoder sees the masked
      sequence, the decoder predicts the next token of the original);
    * patches: ``labels`` are class ids (required).

    With segment embeddings the batch carries ``segment_ids`` (:func:`segment_halves`).
    """
    from ..data.mlm import causal_lm_labels, mask_tokens

    batch = {"padding_mask": padding_mask} if padding_mask is not None else {}
    if config.input == "tokens" and config.n_segments:
        batch["segment_ids"] = segment_halves(inputs, config.n_segments)
    if config.input == "patches":
        if labels is None:
            raise ValueError("a patch model needs class labels")
        return {"inputs": inputs, "labels": labels}
    pad = PAD_ID if padding_mask is not None else None
    if config.arch == "encoder":
        masked, mlm_labels = mask_tokens(inputs, MASK_ID, prob=config.mask_prob, generator=generator, pad_id=pad,
                                         vocab_size=config.vocab_size, random_low=N_SPECIAL)
        return {**batch, "inputs": masked, "labels": mlm_labels}
    next_labels = causal_lm_labels(inputs, pad_id=pad)
    if config.arch == "decoder":
        return {**batch, "inputs": inputs, "labels": next_labels}
    masked, _ = mask_tokens(inputs, MASK_ID, prob=config.mask_prob, generator=generator, pad_id=pad,
                            vocab_size=config.vocab_size, random_low=N_SPECIAL)
    return {**batch, "inputs": masked, "decoder_inputs": inputs, "labels": next_labels,
            **({"decoder_padding_mask": padding_mask} if padding_mask is not None else {})}


def objective_loss(model, batch: dict) -> torch.Tensor:
    """Mean cross-entropy over the positions whose label is not −100 (the class for a patch model)."""
    if not isinstance(batch, dict) or "inputs" not in batch or "labels" not in batch:
        raise ValueError("a batch is a dict with 'inputs' and 'labels' (build it with sigprop.model.make_batch)")
    logits = model(batch["inputs"], segment_ids=batch.get("segment_ids"), padding_mask=batch.get("padding_mask"),
                   decoder_inputs=batch.get("decoder_inputs"),
                   decoder_padding_mask=batch.get("decoder_padding_mask"))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=-100)
