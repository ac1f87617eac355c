"""What a run trained on, as two digests: the SHA-256 of its training and of its validation data, recorded in the
run's ``run.json`` (``data.train_sha256``, ``data.validation_sha256``), so that runs made elsewhere are pooled only
when they saw the same data.

Token ids are hashed as little-endian uint32 (the digest does not depend on the array's storage type); images as
little-endian float32 pixels followed by little-endian int64 labels.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["FINGERPRINT_KEYS", "ids_fingerprint", "images_fingerprint", "same_data", "data_fingerprint"]

#: The keys of a run's data record that hold its fingerprint.
FINGERPRINT_KEYS = ("train_sha256", "validation_sha256")


def ids_fingerprint(ids) -> str:
    """The SHA-256 (hex) of a 1-D array of token ids, as little-endian uint32.

    Args:
        ids: token ids (any integer dtype).

    Returns:
        64 hexadecimal digits.

    Example:
        >>> ids_fingerprint(np.array([1, 2], dtype=np.uint16)) == ids_fingerprint(np.array([1, 2], dtype=np.int64))
        True
    """
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<u4").tobytes()).hexdigest()


def images_fingerprint(pixels, labels) -> str:
    """The SHA-256 (hex) of images and their labels (pixels as little-endian float32, then labels as int64).

    Args:
        pixels: an array or tensor of images.
        labels: their classes.

    Returns:
        64 hexadecimal digits.

    Example:
        >>> len(images_fingerprint(np.zeros((2, 1, 4, 4)), np.array([0, 1])))
        64
    """
    h = hashlib.sha256(np.ascontiguousarray(np.asarray(pixels), dtype="<f4").tobytes())
    h.update(np.ascontiguousarray(np.asarray(labels), dtype="<i8").tobytes())
    return h.hexdigest()


def data_fingerprint(data_record: dict | None) -> dict | None:
    """The fingerprint part of a run's data record (``run.json``'s ``data``), or None where it has none (a run
    recorded before fingerprints were).

    Example:
        >>> data_fingerprint({"kind": "text", "train_sha256": "a", "validation_sha256": "b"})
        {'train_sha256': 'a', 'validation_sha256': 'b'}
    """
    if not isinstance(data_record, dict) or not all(isinstance(data_record.get(k), str) for k in FINGERPRINT_KEYS):
        return None
    return {k: data_record[k] for k in FINGERPRINT_KEYS}


def same_data(stored: dict | None, current: dict) -> bool:
    """Whether a checkpoint's data record ``stored`` describes the data of ``current``: equal, where a record written
    before fingerprints were recorded (no fingerprint keys) is compared on the rest.

    Example:
        >>> same_data({"kind": "text"}, {"kind": "text", "train_sha256": "a", "validation_sha256": "b"})
        True
    """
    if not isinstance(stored, dict):
        return False
    if data_fingerprint(stored) is None:
        current = {k: v for k, v in current.items() if k not in FINGERPRINT_KEYS}
    return stored == current
