"""A user's own images as a patch (ViT) model's batch: a folder of image files, or a NumPy array file.

Kedia et al. App. H take a ViT's input correlation from the images themselves; ``--data PATH`` lets that be your
images. A folder is searched recursively for PNG, JPEG, BMP, GIF and WebP files (hidden files and folders, and the
``__MACOSX`` folder of an archive made on a Mac, skipped); when they sit in two or more
top-level subfolders, each top-level subfolder is a class, whatever folders it holds inside (sorted by name, as
torchvision's ImageFolder does), else every image has class 0; images directly in the folder beside class folders
are refused. A ``.npy`` file holds an array (N, H, W) or (N, C, H, W) with C = 1 or the model's channels (or 3 for a
grey model), read without pickle; a channels-last (N, H, W, C) array is refused. Images are resized to the model's
``image_size`` (bilinear), converted to its ``channels`` (grey copied to every channel, or colour to grey; a folder's
images to 1 or 3 channels; a 16-bit grey image read in full, on the 8-bit scale), and scaled, over the images read, to
unit mean square with pixels kept non-negative (as the digits are: App. H's unit-variance images without the shift
that would make the patches' mean inner product negative).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

__all__ = ["IMAGE_SUFFIXES", "image_files", "read_images"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


def image_files(path) -> tuple[list[Path], list[int], list[str]]:
    """(files, class index per file, class names) of the image folder ``path``, files sorted by path: each
    top-level subfolder is a class when there are two or more (module docstring), else one class.

    Args:
        path: the folder.

    Returns:
        The files, each file's class index, and the class names (the top-level subfolders' names, or the single
        folder's).

    Raises:
        ValueError: the folder holds no image, or holds images directly beside two or more class folders.

    Example:
        >>> import tempfile
        >>> from PIL import Image
        >>> root = Path(tempfile.mkdtemp())
        >>> for name in ("cat/a/1.png", "cat/b/2.png", "dog/3.png"):
        ...     (root / name).parent.mkdir(parents=True, exist_ok=True)
        ...     Image.new("L", (4, 4)).save(root / name)
        >>> image_files(root)[1:]
        ([0, 0, 1], ['cat', 'dog'])
    """
    root = Path(path)
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
                   and not any(_hidden(part) for part in p.relative_to(root).parts))
    if not files:
        raise ValueError(f"no image files ({', '.join(IMAGE_SUFFIXES)}) under {root}")
    tops = [p.relative_to(root).parts[0] if len(p.relative_to(root).parts) > 1 else None for p in files]
    names = sorted({t for t in tops if t is not None})
    if len(names) < 2:
        return files, [0] * len(files), [names[0] if names and None not in tops else "."]
    if None in tops:
        loose = sum(t is None for t in tops)
        raise ValueError(f"{root}: {loose} image(s) directly in the folder beside the class folders "
                         f"{', '.join(names[:4])}{', …' if len(names) > 4 else ''}: move them into a class folder")
    index = {name: i for i, name in enumerate(names)}
    return files, [index[t] for t in tops], names


def _hidden(name: str) -> bool:
    """A hidden file or folder (``.ipynb_checkpoints``, macOS's ``._x.png``) or the ``__MACOSX`` folder an archive
    made on a Mac leaves: never an image or a class."""
    return name.startswith(".") or name == "__MACOSX"


#: Pillow's modes of 16-bit grey images (a 16-bit PNG), whose conversion to 8-bit grey clips every value above 255.
_WIDE_GREY = ("I;16", "I;16B", "I;16L", "I")


def _load_file(path: Path, size: int, channels: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            if im.mode in _WIDE_GREY:  # onto the 8-bit scale (65535 -> 255), in floats, so that 8- and 16-bit mix
                wide = np.asarray(im.convert("I"), dtype=np.float64)
                if wide.min() < 0 or wide.max() > 65535:
                    raise ValueError(f"image {path}: {im.mode} pixels outside the 16-bit range 0..65535")
                grey = Image.fromarray((wide / 257.0).astype(np.float32), mode="F").resize((size, size),
                                                                                         Image.BILINEAR)
                x = np.asarray(grey, dtype=np.float64)
            else:
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
        elif channels == 1 and x.shape[1] == 3:
            x = x.mean(dim=1, keepdim=True)
        else:
            last = ("; a channels-last (N, H, W, C) array needs np.moveaxis(a, -1, 1)"
                    if a.shape[-1] in (1, 3, channels) else "")
            raise ValueError(f"{path}: {x.shape[1]} channels on axis 1 of an (N, C, H, W) array, the model takes "
                             f"{channels}{last}")
    if x.shape[-2:] != (size, size):
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x.numpy()


def read_images(path, count: int | None, size: int, channels: int, n_classes: int,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(images (count, channels, size, size) float32, classes (count,) int64) from the folder or ``.npy`` file
    ``path``: ``count`` images (None: all of them), a random choice if ``generator`` is given (else the first),
    prepared as the module docstring says. ``ValueError`` with the reason for a missing path, too few images, more
    classes than the model's ``n_classes``, a folder read into other than 1 or 3 channels, negative pixels in an
    array, an unreadable file or an all-zero batch."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"image data not found: {p}")
    if p.is_dir() and channels not in (1, 3):
        raise ValueError(f"{p}: image files are read as grey (1 channel) or colour (3); the model takes {channels} "
                         "channels: pass a .npy array (N, C, H, W) instead")
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
    count = total if count is None else count
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
