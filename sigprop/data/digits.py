"""Real images with nothing downloaded: scikit-learn's digits (1797 grey 8×8 images of the ten digits, bundled with
scikit-learn), upsampled to a model's image size. Used by the APJN experiments (Alekseev 2026, App. A) and as the
default image batch of patch (ViT) models (Kedia et al. App. H)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from ..core.validate import integer_value

__all__ = ["digits", "digits_images", "N_DIGITS", "N_DIGIT_CLASSES"]

#: Images in the data set, and their classes (0–9).
N_DIGITS = 1797
N_DIGIT_CLASSES = 10


@lru_cache(maxsize=1)
def _digits_raw() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # bundled with scikit-learn: no download

    data = load_digits()
    return data.images.astype(np.float64), data.target.astype(np.int64)  # (1797, 8, 8) in 0..16; (1797,)


@lru_cache(maxsize=8)
def _upsampled_stats(size: int, mode: str) -> tuple[float, float]:
    x = _upsample(torch.from_numpy(_digits_raw()[0]), size, mode)
    return float(x.mean()), float(x.std())


@lru_cache(maxsize=8)
def _upsampled_rms(size: int, mode: str) -> float:
    x = _upsample(torch.from_numpy(_digits_raw()[0]), size, mode)
    return float(x.pow(2).mean().sqrt())


def _upsample(x: torch.Tensor, size: int, mode: str) -> torch.Tensor:
    x = x[:, None]
    if x.shape[-1] == size:
        return x
    kw = {} if mode == "nearest" else {"align_corners": False}
    return F.interpolate(x, size=(size, size), mode=mode, **kw)


def digits(indices: Sequence[int] | None = None, count: int | None = None, size: int = 32, channels: int = 1,
           mode: str = "bilinear", generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32,
           normalise: str = "standard") -> tuple[torch.Tensor, torch.Tensor]:
    """(images, labels) of scikit-learn's digits: images (N, ``channels``, ``size``, ``size``) upsampled by ``mode``
    ("bilinear", "bicubic" or "nearest"; the APJN paper resizes CIFAR-100 to 224×224) and, with
    ``normalise="standard"``, shifted and scaled to zero mean and unit variance with the statistics of the whole
    upsampled data set (the same transform whatever the subset), with ``normalise="unit"`` scaled to [0, 1]
    (pixel/16), or with ``normalise="rms"`` scaled to unit mean square over the data set (non-negative pixels of
    second moment 1: App. H's "images normalised to unit variance" without the shift that would make the patches'
    mean inner product negative); grey is copied to every channel. Labels: the digit, 0–9
    (int64). Chosen by ``indices``, else ``count`` images (random ones if a ``generator`` is given, else the first),
    else all. ``ValueError`` on a bad argument."""
    size, channels = integer_value(size, "size", 8), integer_value(channels, "channels", 1)
    if mode not in ("bilinear", "bicubic", "nearest"):
        raise ValueError(f"mode must be one of bilinear, bicubic, nearest (got {mode!r})")
    if normalise not in ("standard", "unit", "rms"):
        raise ValueError(f"normalise must be 'standard', 'unit' or 'rms' (got {normalise!r})")
    raw, target = _digits_raw()
    if indices is not None:
        idx = np.asarray(list(indices), dtype=np.int64)
        if idx.size == 0 or idx.min() < 0 or idx.max() >= N_DIGITS:
            raise ValueError(f"indices must be a non-empty list of integers in [0, {N_DIGITS})")
    elif count is not None:
        count = integer_value(count, "count", 1)
        if count > N_DIGITS:
            raise ValueError(f"count must be <= {N_DIGITS} (the size of the digits data set); got {count}")
        idx = (torch.randperm(N_DIGITS, generator=generator)[:count].numpy() if generator is not None
               else np.arange(count))
    else:
        idx = np.arange(N_DIGITS)
    if normalise == "standard":
        mean, std = _upsampled_stats(size, mode)
    else:
        mean, std = 0.0, (16.0 if normalise == "unit" else _upsampled_rms(size, mode))
    x = (_upsample(torch.from_numpy(raw[idx]), size, mode) - mean) / std
    return x.expand(-1, channels, -1, -1).to(dtype).contiguous(), torch.from_numpy(target[idx].copy())


def digits_images(indices: Sequence[int] | None = None, count: int | None = None, size: int = 32,
                  channels: int = 1, mode: str = "bilinear", generator: torch.Generator | None = None,
                  dtype: torch.dtype = torch.float32, normalise: str = "standard") -> torch.Tensor:
    """The images of :func:`digits` (same arguments), without their labels.

    Digits have a uniform dark background, so after "standard" normalisation an image's pixels sum to about zero and
    its tokens' mean pairwise product p⁰ (Alekseev Eq. 21) comes out near zero or slightly negative; "unit" pixels
    are non-negative and give p⁰ > 0 (the regime p⁰ ≥ 0 that Alekseev Sec. 3.1 analyses)."""
    return digits(indices, count, size, channels, mode, generator, dtype, normalise)[0]
