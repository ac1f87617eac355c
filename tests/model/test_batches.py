"""The batch fingerprint that ties a stored measurement to the batch it was measured on (``compare --measured``)."""

import pytest
import torch

from sigprop.analysis.experiment import check_same_batch
from sigprop.core.profile import Profile, Row
from sigprop.model.batches import batch_fingerprint


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
