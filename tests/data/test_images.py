"""A user's images as a patch model's batch: folders as classes, .npy arrays, resizing, channels, scaling, errors."""

import numpy as np
import pytest
import torch
from PIL import Image

from sigprop.data.images import image_files, read_images


def _png(path, value, size=(10, 7), mode="L"):
    path.parent.mkdir(parents=True, exist_ok=True)
    shape = size[::-1] + ((3,) if mode == "RGB" else ())
    Image.fromarray(np.full(shape, value, dtype=np.uint8), mode=mode).save(path)


def test_a_folder_with_class_subfolders(tmp_path):
    for i in range(3):
        _png(tmp_path / "cats" / f"{i}.png", 40 + i)
        _png(tmp_path / "dogs" / f"{i}.jpg", 200, mode="RGB")
    (tmp_path / "notes.txt").write_text("not an image")
    files, classes, names = image_files(tmp_path)
    assert names == ["cats", "dogs"] and len(files) == 6 and sorted(set(classes)) == [0, 1]
    images, labels = read_images(tmp_path, 6, size=8, channels=3, n_classes=10)
    assert images.shape == (6, 3, 8, 8) and images.dtype == torch.float32
    assert labels.tolist() == classes  # the first six, in path order
    assert float(images.double().pow(2).mean()) == pytest.approx(1.0, rel=1e-6)  # unit mean square, float32
    assert float(images.min()) >= 0.0
    some, _ = read_images(tmp_path, 2, size=8, channels=1, n_classes=10, generator=torch.Generator().manual_seed(0))
    again, _ = read_images(tmp_path, 2, size=8, channels=1, n_classes=10, generator=torch.Generator().manual_seed(0))
    assert some.shape == (2, 1, 8, 8) and torch.equal(some, again)


def test_a_flat_folder_is_one_class(tmp_path):
    for i in range(2):
        _png(tmp_path / f"{i}.png", 10 * (i + 1))
    _, labels = read_images(tmp_path, 2, size=4, channels=1, n_classes=2)
    assert labels.tolist() == [0, 0]


def test_a_numpy_array(tmp_path):
    a = np.random.default_rng(0).uniform(0, 255, size=(5, 6, 6))
    np.save(tmp_path / "x.npy", a)
    images, labels = read_images(tmp_path / "x.npy", 3, size=6, channels=3, n_classes=10)
    assert images.shape == (3, 3, 6, 6) and labels.tolist() == [0, 0, 0]
    expected = a[:3] / np.sqrt(np.mean(a[:3] ** 2))
    np.testing.assert_allclose(images[:, 0].numpy(), expected, rtol=1e-6)  # grey copied, no resize needed


def test_what_is_refused(tmp_path):
    np.save(tmp_path / "neg.npy", -np.ones((2, 4, 4)))
    np.save(tmp_path / "zero.npy", np.zeros((2, 4, 4)))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "x.png").write_bytes(b"not a png")
    for i in range(3):
        _png(tmp_path / "many" / f"c{i}" / "a.png", 9)
    cases = [(tmp_path / "none", "not found"), (tmp_path / "neg.npy", "negative pixels"),
             (tmp_path / "zero.npy", "all zero"), (tmp_path / "obj.npy", "pickled arrays are refused"),
             (tmp_path / "empty", "no image files"), (tmp_path / "bad", "cannot read image"),
             (tmp_path / "many", "3 class folders")]
    for path, message in cases:
        with pytest.raises(ValueError, match=message):
            read_images(path, 1, size=4, channels=1, n_classes=2)
    with pytest.raises(ValueError, match="holds 2 images"):
        read_images(tmp_path / "neg.npy", 3, size=4, channels=1, n_classes=2)


def test_each_top_level_folder_is_one_class_whatever_it_holds_inside(tmp_path):
    """torchvision's ImageFolder: a class is a top-level subfolder; its own subfolders do not split it."""
    for name in ("cat/a/1.png", "cat/b/2.png", "dog/3.png"):
        _png(tmp_path / name, 50)
    files, classes, names = image_files(tmp_path)
    assert names == ["cat", "dog"] and classes == [0, 0, 1]
    _, labels = read_images(tmp_path, 3, size=4, channels=1, n_classes=2)
    assert labels.tolist() == [0, 0, 1]
    one = tmp_path / "one"
    _png(one / "x" / "a.png", 9)
    _png(one / "y" / "b.png", 9)
    assert image_files(one / "x")[1:] == ([0], ["."]) and image_files(tmp_path / "cat")[1:] == ([0, 1], ["a", "b"])


def test_images_beside_class_folders_are_refused(tmp_path):
    _png(tmp_path / "loose.png", 9)
    _png(tmp_path / "cat" / "1.png", 9)
    _png(tmp_path / "dog" / "2.png", 9)
    with pytest.raises(ValueError, match="1 image.s. directly in the folder beside the class folders cat, dog"):
        image_files(tmp_path)


def test_a_channels_last_array_and_odd_folder_channels_are_refused(tmp_path):
    np.save(tmp_path / "nhwc.npy", np.ones((5, 32, 32, 3)))
    for channels in (1, 3):
        with pytest.raises(ValueError, match=r"32 channels on axis 1 .* np\.moveaxis\(a, -1, 1\)"):
            read_images(tmp_path / "nhwc.npy", 2, size=8, channels=channels, n_classes=2)
    colour = np.random.default_rng(0).uniform(1, 2, size=(2, 3, 4, 4))
    np.save(tmp_path / "nchw.npy", colour)
    grey, _ = read_images(tmp_path / "nchw.npy", 2, size=4, channels=1, n_classes=2)  # colour to grey: the mean
    expected = colour.mean(axis=1)
    np.testing.assert_allclose(grey[:, 0].numpy(), expected / np.sqrt(np.mean(expected**2)), rtol=1e-6)
    _png(tmp_path / "folder" / "a.png", 9)
    with pytest.raises(ValueError, match="read as grey .1 channel. or colour .3.; the model takes 4 channels"):
        read_images(tmp_path / "folder", 1, size=4, channels=4, n_classes=2)


def test_count_none_reads_every_image(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((7, 4, 4)))
    assert read_images(tmp_path / "x.npy", None, size=4, channels=1, n_classes=1)[0].shape == (7, 1, 4, 4)


def test_hidden_entries_and_a_mac_archive_s_folder_are_not_images_or_classes(tmp_path):
    """An archive unzipped from a Mac leaves ``__MACOSX/cat/._1.png`` (AppleDouble bytes): it was a class, shifted
    every label and stopped the read; a notebook's ``.ipynb_checkpoints`` was a class too."""
    _png(tmp_path / "cat" / "1.png", 10)
    _png(tmp_path / "dog" / "2.png", 20)
    for junk in ("__MACOSX/cat/._1.png", "cat/._1.png", ".ipynb_checkpoints/x.png"):
        (tmp_path / junk).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / junk).write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    files, classes, names = image_files(tmp_path)
    assert names == ["cat", "dog"] and classes == [0, 1] and [f.name for f in files] == ["1.png", "2.png"]
    _, labels = read_images(tmp_path, None, size=4, channels=1, n_classes=2)
    assert labels.tolist() == [0, 1]


def test_a_16_bit_grey_image_is_read_in_full_on_the_8_bit_scale(tmp_path):
    """Pillow's 8-bit conversion clipped a 16-bit PNG at 255: every non-zero pixel came out the same."""
    wide = (np.arange(16, dtype=np.uint16) * 4000).reshape(4, 4)
    Image.fromarray(wide).save(tmp_path / "wide.png")
    Image.fromarray((wide / 257.0).round().astype(np.uint8)).save(tmp_path / "narrow.png")
    images, _ = read_images(tmp_path, None, size=4, channels=1, n_classes=1)  # files in path order: narrow, wide
    narrow, full = images[0, 0].double(), images[1, 0].double()
    assert len(torch.unique(full)) == 16  # all distinct, none clipped
    # one scale c for both (unit mean square over the images read): the same picture at both depths, apart from
    # the 8-bit copy's rounding of at most half a level, 0.5 c (and float32's rounding)
    c = float(full.max()) / (float(wide.max()) / 257.0)
    assert float((full - narrow).abs().max()) <= 0.5 * c * (1 + 1e-5)
    three, _ = read_images(tmp_path, None, size=4, channels=3, n_classes=1)
    assert torch.equal(three[1, 0], three[1, 2])
