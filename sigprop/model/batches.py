"""Batches for a model of a config: real text (or i.i.d. Zipf tokens) with the objective's corruption and labels,
images for a patch model, and the fingerprint a measurement records of its batch."""

from __future__ import annotations

import torch

from ..core.outputs import StrPath
from .batch import Batch
from .config import TransformerConfig
from .objective import make_batch

__all__ = ["token_batch", "image_batch", "batch_fingerprint", "config_fingerprint", "batch_to"]


def token_batch(config: TransformerConfig, batch_size: int = 8, data: StrPath | None = None, seed: int = 0,
                synthetic: bool = False) -> Batch:
    """A batch for ``config``'s objective: ``batch_size`` windows of ``config.seq_len`` real tokens from the corpus
    (default: the Python standard library's source; ``data``: a user's file or folder), tokenised with a BPE of
    ``config.vocab_size`` trained and cached locally, or i.i.d. Zipf(1) tokens with ``synthetic``; then masked-LM
    corruption (encoder) or next-token labels (decoder)."""
    if config.input != "tokens":
        raise ValueError("token_batch: this config takes image patches, not tokens")
    gen = torch.Generator().manual_seed(seed)
    if synthetic:
        from ..data.zipf import zipf_tokens

        ids = zipf_tokens(batch_size, config.seq_len, config.vocab_size - 5, generator=gen, first_id=5)
    else:
        from ..data.batches import load_batch

        ids = load_batch(batch_size, config.seq_len, path=data, vocab_size=config.vocab_size, seed=seed)
    return make_batch(config, ids, generator=gen)


def image_batch(config: TransformerConfig, batch_size: int = 8, seed: int = 0, synthetic: bool = False,
                data: StrPath | None = None) -> Batch:
    """A batch for a patch model of ``config``: ``batch_size`` of scikit-learn's digits (bundled, nothing
    downloaded; drawn at random from ``seed``), upsampled to ``config.image_size``, pixels scaled to unit mean
    square over the data set and copied to every channel, with their digit as the class
    (:func:`sigprop.data.digits.digits`, ``normalise="rms"``), or with ``synthetic`` i.i.d. uniform pixels of unit
    mean square and uniformly random classes. Kedia et al. App. H normalises images to about unit variance; keeping
    the pixels non-negative keeps the patches' inner products, hence the input token correlation the rules need,
    non-negative (standardised digits give about −0.007; App. H measures 0.46 for ImageNet). ``data``: your own
    images instead, a folder (subfolders as classes) or a ``.npy`` array (:func:`sigprop.data.images.read_images`).
    ``ValueError`` for a token model, a batch larger than the data set, or fewer classes than digits."""
    from ..data.digits import N_DIGIT_CLASSES, N_DIGITS, digits

    if config.input != "patches":
        raise ValueError("image_batch: this config takes tokens, not image patches")
    gen = torch.Generator().manual_seed(seed)
    if data is not None:
        from ..data.images import read_images

        images, labels = read_images(data, batch_size, config.image_size, config.channels, config.n_classes, gen)
        return make_batch(config, images, labels=labels)
    if synthetic:
        shape = (batch_size, config.channels, config.image_size, config.image_size)
        return make_batch(config, torch.rand(shape, generator=gen) * 3.0**0.5,  # E[u²] = 1 for u ~ U(0, √3)
                          labels=torch.randint(config.n_classes, (batch_size,), generator=gen))
    if config.n_classes < N_DIGIT_CLASSES:
        raise ValueError(f"the digits have {N_DIGIT_CLASSES} classes but the model has n_classes = {config.n_classes}: "
                         "set n_classes >= 10, or use synthetic images")
    if batch_size > N_DIGITS:
        raise ValueError(f"batch_size must be <= {N_DIGITS} (the digits data set)")
    images, labels = digits(count=batch_size, size=config.image_size, channels=config.channels, generator=gen,
                            normalise="rms")
    return make_batch(config, images, labels=labels)


def batch_fingerprint(batch: Batch | dict) -> str:
    """SHA-256 of a batch's tensors (field name, dtype, shape and values, in name order; a :class:`Batch` or sigprop's
    dict): a measurement records it so that a later comparison against it (:func:`compare_config` with ``measured``)
    can check it predicts the same batch."""
    import hashlib

    h = hashlib.sha256()
    for key, tensor in sorted(Batch.from_any(batch).to_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{key}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def batch_to(batch: Batch | dict, device: torch.device | str | None) -> Batch:
    """``batch`` (a :class:`Batch` or sigprop's dict) as a :class:`Batch` on ``device``."""
    return Batch.from_any(batch).to(device)


#: Config fields added after measurements began to record their config's fingerprint, with their defaults: left out
#: of the fingerprint while at the default, so that a stored measurement still matches its config.
_FIELDS_SINCE_FINGERPRINT = {"embed_scale": 1.0, "qk_norm": False, "rotary_fraction": 1.0,
                             "parallel_block": False, "head_transform": False,
                             "pool": "mean", "embed_dropout": None}


def config_fingerprint(config: TransformerConfig) -> str:
    """SHA-256 of a config's fields (sorted JSON): a measurement records it, so that a file whose config was edited
    afterwards is refused instead of compared as the model it no longer describes."""
    import hashlib
    import json

    fields = {k: v for k, v in config.to_dict().items() if _FIELDS_SINCE_FINGERPRINT.get(k, object()) != v}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
