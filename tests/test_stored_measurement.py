"""A measurement stored as JSON (a measured profile or a comparison) read back for ``compare --measured``, and the
batch fingerprint that ties it to the batch it was measured on."""

import pytest
import torch

from sigprop.comparison import compare, measured_from_json, read_measured
from sigprop.experiment import batch_fingerprint, check_same_batch
from sigprop.profile import Profile, Row


def test_batch_fingerprint_and_the_stored_measurement_check():
    batch = {"inputs": torch.arange(6).reshape(2, 3), "labels": torch.full((2, 3), -100), "note": "not a tensor"}
    same = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    assert batch_fingerprint(batch) == batch_fingerprint(same)
    for changed in ({**batch, "inputs": batch["inputs"].flip(0)}, {**batch, "inputs": batch["inputs"].reshape(3, 2)},
                    {**batch, "labels": batch["labels"].to(torch.int32)}, {"inputs": batch["inputs"]}):
        assert batch_fingerprint(changed) != batch_fingerprint(batch)
    meas = Profile("measured", {"n_layers": 1}, (Row(0, "layer", 0.0, 1.0, 0.5, 1.0, 0.1),),
                   {"batch_sha256": batch_fingerprint(batch)})
    check_same_batch(meas, same)
    with pytest.raises(ValueError, match="not the one measured"):
        check_same_batch(meas, {**batch, "inputs": batch["inputs"] + 1})
    check_same_batch(Profile("measured", {"n_layers": 1}, meas.rows, {}), batch)  # older files: on trust
    with pytest.raises(ValueError, match="no model configuration"):
        check_same_batch(Profile("measured", {}, meas.rows, {}), batch)


def test_a_comparison_file_gives_back_its_measurement(tmp_path):
    pred = Profile("predicted", {"n_layers": 2}, (Row(0, "layer", 0.0, 1.0, 0.5, 2.0, 0.1),
                                                  Row(1, "layer", 0.0, 1.5, 0.6, 1.0, 0.2)), {})
    meas = Profile("measured", {"n_layers": 2}, (Row(0, "layer", 0.01, 1.1, 0.55, 2.2, 0.12),
                                                 Row(1, "layer", -0.01, 1.4, 0.62, 1.0, 0.2)),
                   {"seeds": [0, 1], "stderr": {"0:layer": {"fwd_var": 0.1}}})
    back = measured_from_json(compare(pred, meas).to_json())
    assert back.kind == "measured" and back.rows == meas.rows and back.meta == meas.meta
    assert back.config == pred.config
    assert measured_from_json(meas.to_json()).rows == meas.rows
    path = tmp_path / "m.json"
    meas.write_json(path)
    assert read_measured(path).rows == meas.rows
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        read_measured(path)
    with pytest.raises(ValueError, match="kind"):
        measured_from_json([1, 2])
