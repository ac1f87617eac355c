"""Device specifications: parsed and checked before anything is measured, with a message naming the entry."""

import pytest
import torch

from sigprop.core.devices import check_device, parse_devices


def test_default_and_lists():
    assert parse_devices(None) == [torch.device("cpu")]
    assert parse_devices("cpu") == [torch.device("cpu")]
    assert parse_devices(" cpu , cpu ") == [torch.device("cpu"), torch.device("cpu")]
    assert parse_devices(["cpu", torch.device("cpu")]) == [torch.device("cpu")] * 2
    assert parse_devices(torch.device("cpu")) == [torch.device("cpu")]


@pytest.mark.parametrize("spec,message", [
    ("gpu", "not a torch device: 'gpu'"),
    ("cpu,", "empty entry"),
    (",cpu", "empty entry"),
    ("meta", "cpu, cuda or mps"),
])
def test_bad_specifications_name_the_entry(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_devices(spec)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_missing_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA is not available"):
        check_device("cuda:1")
    with pytest.raises(ValueError, match="CUDA is not available"):
        parse_devices("cpu,cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_index_beyond_the_machine():
    n = torch.cuda.device_count()
    assert check_device("cuda:0") == torch.device("cuda:0")
    with pytest.raises(ValueError, match=f"{n} CUDA device"):
        check_device(f"cuda:{n}")
