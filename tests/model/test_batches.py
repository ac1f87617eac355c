"""The batch fingerprint that ties a stored measurement to the batch it was measured on (``compare --measured``)."""

from dataclasses import replace

import pytest
import torch

from sigprop.analysis.experiment import check_same_batch
from sigprop.core.profile import Profile, Row
from sigprop.model.batch import Batch
from sigprop.model.batches import batch_fingerprint


def test_batch_fingerprint_and_the_stored_measurement_check():
    batch = Batch(torch.arange(6).reshape(2, 3), torch.full((2, 3), -100))
    same = Batch(batch.inputs.clone(), batch.labels.clone())
    assert batch_fingerprint(batch) == batch_fingerprint(same) == batch_fingerprint(same.to_dict())  # a dict too
    for changed in (replace(batch, inputs=batch.inputs.flip(0)),
                    Batch(batch.inputs.reshape(3, 2), batch.labels.reshape(3, 2)),
                    replace(batch, labels=batch.labels.to(torch.int32)), Batch(batch.inputs)):
        assert batch_fingerprint(changed) != batch_fingerprint(batch)
    meas = Profile("measured", {"n_layers": 1}, (Row(0, "layer", 0.0, 1.0, 0.5, 1.0, 0.1),),
                   {"batch_sha256": batch_fingerprint(batch)})
    check_same_batch(meas, same)
    with pytest.raises(ValueError, match="not the one measured"):
        check_same_batch(meas, replace(batch, inputs=batch.inputs + 1))
    check_same_batch(Profile("measured", {"n_layers": 1}, meas.rows, {}), batch)  # older files: on trust
    with pytest.raises(ValueError, match="no model configuration"):
        check_same_batch(Profile("measured", {}, meas.rows, {}), batch)
