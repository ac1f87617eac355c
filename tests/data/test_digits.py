"""scikit-learn's bundled digits as model inputs: images with their classes, three normalisations."""

import pytest
import torch
from sklearn.datasets import load_digits

from sigprop.data.digits import N_DIGITS, digits, digits_images


def test_images_come_with_their_classes():
    images, labels = digits(indices=[0, 5, 1796], size=8)
    assert images.shape == (3, 1, 8, 8) and labels.dtype == torch.int64
    assert labels.tolist() == load_digits().target[[0, 5, 1796]].tolist()
    torch.testing.assert_close(images, digits_images(indices=[0, 5, 1796], size=8), rtol=0, atol=0)


@pytest.mark.parametrize("normalise,mean,mean_square", [("standard", 0.0, 1.0), ("rms", None, 1.0)])
def test_normalisations_over_the_whole_data_set(normalise, mean, mean_square):
    x = digits(size=16, normalise=normalise, dtype=torch.float64)[0]
    assert x.shape == (N_DIGITS, 1, 16, 16)
    if mean is not None:
        assert float(x.mean()) == pytest.approx(mean, abs=1e-9)
    # "standard": unit sample variance (the n − 1 estimator); "rms": unit mean square
    second = float(x.var()) if normalise == "standard" else float(x.pow(2).mean())
    assert second == pytest.approx(mean_square, rel=1e-9)
    if normalise == "rms":
        assert float(x.min()) >= 0.0  # non-negative pixels: non-negative patch inner products


def test_unit_pixels_and_errors():
    x = digits(count=4, size=8, normalise="unit")[0]
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    for kw, message in (({"normalise": "zscore"}, "normalise"), ({"mode": "area"}, "mode"), ({"size": 4}, "size"),
                        ({"count": N_DIGITS + 1}, "count"), ({"indices": [N_DIGITS]}, "indices")):
        with pytest.raises(ValueError, match=message):
            digits(**kw)
