"""A user's own images as a patch (ViT) model's batch: a folder of image files, or a NumPy array file.

Kedia et al. App. H take a ViT's input correlation from the images themselves; ``--data PATH`` lets that be your
images. A folder is searched recursively for PNG, JPEG, BMP, GIF and WebP files; when they sit in two or more
subfolders, each subfolder is a class (sorted by name, as torchvision's ImageFolder does), else every image has class
0. A ``.npy`` file holds an array (N, H, W) or (N, C, H, W), read without pickle. Images are resized to the model's
``image_size`` (bilinear), converted to its ``channels`` (grey copied to every channel, or colour to grey), and
scaled, over the images read, to unit mean square with pixels kept non-negative (as the digits are: App. H's
unit-variance images without the shift that would make the patches' mean inner product negative).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

__all__ = ["IMAGE_SUFFIXES", "image_files", "read_images"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


def image_files(path) -> tuple[list[Path], list[int], list[str]]:
    """(files, class index per file, class names) of the image folder ``path``, files sorted by path.
    ``ValueError`` if the folder holds no image."""
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"no image files ({', '.join(IMAGE_SUFFIXES)}) under {root}")
    parents = sorted({p.parent.relative_to(root).as_posix() for p in files})
    if len(parents) < 2:
        return files, [0] * len(files), [parents[0] or "."]
    index = {name: i for i, name in enumerate(parents)}
    return files, [index[p.parent.relative_to(root).as_posix()] for p in files], parents


def _load_file(path: Path, size: int, channels: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("L" if channels == 1 else "RGB").resize((size, size), Image.BILINEAR)
            x = np.asarray(im, dtype=np.float64)
    except (OSError, UnidentifiedImageError) as err:
        raise ValueError(f"cannot read image {path}: {err}") from None
    x = x[None] if x.ndim == 2 else x.transpose(2, 0, 1)  # (C, H, W)
    return np.repeat(x, channels, axis=0) if x.shape[0] == 1 and channels > 1 else x


def _from_array(path: Path, size: int, channels: int) -> np.ndarray:
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ValueError(f"cannot read {path} as a NumPy array (pickled arrays are refused): {err}") from None
    if a.ndim == 3:
        a = a[:, None]
    if a.ndim != 4 or not np.issubdtype(a.dtype, np.number):
        raise ValueError(f"{path}: expected a numeric array (N, H, W) or (N, C, H, W), got shape {a.shape}")
    x = torch.from_numpy(a.astype(np.float64))
    if x.shape[1] != channels:
        if x.shape[1] == 1:
            x = x.expand(-1, channels, -1, -1)
        elif channels == 1:
            x = x.mean(dim=1, keepdim=True)
        else:
            raise ValueError(f"{path}: {x.shape[1]} channels, the model takes {channels}")
    if x.shape[-2:] != (size, size):
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x.numpy()


def read_images(path, count: int, size: int, channels: int, n_classes: int,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(images (count, channels, size, size) float32, classes (count,) int64) from the folder or ``.npy`` file
    ``path``: ``count`` images, a random choice if ``generator`` is given (else the first), prepared as the module
    docstring says. ``ValueError`` with the reason for a missing path, too few images, more classes than the
    model's ``n_classes``, negative pixels in an array, an unreadable file or an all-zero batch."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"image data not found: {p}")
    if p.is_file():
        if p.suffix.lower() != ".npy":
            raise ValueError(f"{p}: a patch model reads a folder of images or a .npy array")
        every = _from_array(p, size, channels)
        labels = np.zeros(every.shape[0], dtype=np.int64)
        total = every.shape[0]
    else:
        files, classes, names = image_files(p)
        if len(names) > n_classes:
            raise ValueError(f"{p} has {len(names)} class folders but the model has n_classes = {n_classes}")
        total = len(files)
    if count > total:
        raise ValueError(f"{p} holds {total} images; the batch needs {count}")
    order = torch.randperm(total, generator=generator)[:count] if generator is not None else torch.arange(count)
    idx = order.numpy()
    if p.is_file():
        x, y = every[idx], labels[idx]
    else:
        x = np.stack([_load_file(files[i], size, channels) for i in idx])
        y = np.array([classes[i] for i in idx], dtype=np.int64)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{p}: the images hold NaN or infinite pixels")
    if np.any(x < 0):
        raise ValueError(f"{p}: negative pixels; pass non-negative images (the rules need non-negative patch "
                         "inner products)")
    rms = float(np.sqrt(np.mean(x**2)))
    if rms == 0.0:
        raise ValueError(f"{p}: the images read are all zero")
    return torch.from_numpy(x / rms).float(), torch.from_numpy(y)
