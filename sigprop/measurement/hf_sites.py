"""Hugging Face models measured by sigprop: the sites (the residual stream entering the first block and after each
block) and the loss of GPT-2, BERT and Llama-family models, so that ``sigprop.measure(hf_model, batch)`` records the
same statistics as for a sigprop model, on a batch from ``sigprop.make_batch(sigprop.from_hf(config), token_ids)``.

Sites. ``(-1, "input")`` is the embedding output the first block reads (after GPT-2's embedding dropout, after
BERT's embedding LayerNorm and dropout, Llama's token embedding), ``(i, "layer")`` the residual stream after block i:
the block's output, which is not ``output_hidden_states``' last entry (that one is after the final norm). A block
that returns a tuple (transformers 4) is read at its first element (:class:`~sigprop.measurement.hooks.Recorder`).
The loss is the mean cross-entropy over the labelled positions of the batch (labels −100 elsewhere), as sigprop's
objective, with the batch's ``padding_mask`` passed as ``attention_mask`` and excluded from every statistic.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

__all__ = ["FAMILIES", "is_hf_model", "hf_sites", "hf_loss"]

#: Hugging Face model_type → the family whose sites, loss and configuration mapping sigprop has
#: (:mod:`sigprop.hf.config_map` maps the configurations).
FAMILIES = {"gpt2": "gpt2", "bert": "bert", "llama": "llama", "qwen2": "llama", "mistral": "llama"}


def is_hf_model(model) -> bool:
    """A ``transformers`` model of a family sigprop maps."""
    cfg = getattr(model, "config", None)
    return isinstance(model, nn.Module) and getattr(cfg, "model_type", None) in FAMILIES and not hasattr(model, "sites")


def _base(model, attribute: str):
    return getattr(model, attribute, model)


def hf_sites(model) -> list[tuple[int, str, nn.Module]]:
    """(layer, site, module) of a Hugging Face model (module docstring). ``ValueError`` for an unmapped family."""
    kind = FAMILIES.get(getattr(model.config, "model_type", None))
    if kind == "gpt2":
        base = _base(model, "transformer")
        return [(-1, "input", base.drop)] + [(i, "layer", block) for i, block in enumerate(base.h)]
    if kind == "bert":
        base = _base(model, "bert")
        return [(-1, "input", base.embeddings)] + [(i, "layer", block) for i, block in enumerate(base.encoder.layer)]
    if kind == "llama":
        base = _base(model, "model")
        return [(-1, "input", base.embed_tokens)] + [(i, "layer", block) for i, block in enumerate(base.layers)]
    raise ValueError(f"no sites for model_type {getattr(model.config, 'model_type', None)!r}; supported: "
                     f"{', '.join(FAMILIES)}")


def hf_loss(model, batch: dict):
    """Mean cross-entropy of ``model``'s logits over the batch's labelled positions (sigprop's objective)."""
    kwargs = {"input_ids": batch["inputs"]}
    if batch.get("padding_mask") is not None:
        kwargs["attention_mask"] = batch["padding_mask"].long()
    if batch.get("segment_ids") is not None:
        kwargs["token_type_ids"] = batch["segment_ids"]
    logits = model(**kwargs).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=-100)
