"""Checkpoints that survive anything: tensors in ``safetensors``, everything else in JSON, no pickle anywhere.

A checkpoint after ``step`` completed steps is two files in the run directory:

* ``ckpt-<step>.safetensors``: the model's state (``model/<name>``), the optimiser's per-parameter state
  (``optim/<index>/<key>``: AdamW's ``step``, ``exp_avg``, ``exp_avg_sq``) and the random generators' states that
  are tensors (``rng/torch``, ``rng/cuda/<device>``, ``rng/numpy``, ``rng/python``);
* ``ckpt-<step>.json``: the format, the step, both configs, the tensors file's name and SHA-256, the rest of the
  generators' states, the data position (the next step: a step's batch is a function of the seed and the step,
  :mod:`sigprop.train.data`), the world size, the metrics lines written so far, and the versions.

Each file is written to a temporary name in the same folder, flushed and fsync'ed, then renamed over its final name,
and the folder fsync'ed: the JSON is written last and is the commit, so a process killed at any instant leaves the
previous checkpoint complete and a later one either complete or absent. Loading checks the JSON, the SHA-256 of the
tensors, the configs against the run's and every tensor's name and shape against the model before anything is
copied, so a truncated, tampered or foreign checkpoint is a one-line ``CheckpointError``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..core.atomic import atomic_path
from ..core.jsonio import read_json
from ..data.fingerprint import same_data

__all__ = ["CheckpointError", "Checkpoint", "save_checkpoint", "load_checkpoint", "latest_checkpoint",
           "list_checkpoints", "FORMAT", "rng_state_tensors", "restore_rng"]

FORMAT = "sigprop-checkpoint/1"
_NAME = re.compile(r"^ckpt-(\d{8,})\.json$")  # the step, zero-padded to 8 digits (more from step 10⁸ on)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: missing, truncated, tampered with, or written for another model."""


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint read back: its ``step``, its JSON ``info`` and its ``tensors`` (name → CPU tensor)."""

    step: int
    info: dict
    tensors: dict


def _write_durable(path: Path, data: bytes) -> None:
    """``data`` to ``path``: a temporary file in the same folder, flushed, fsync'ed, renamed, the folder fsync'ed
    (:func:`~sigprop.core.atomic.atomic_path`)."""
    with atomic_path(path, durable=True) as tmp:
        tmp.write_bytes(data)


def rng_state_tensors() -> tuple[dict, dict]:
    """Every random generator's state, as (tensors, JSON): torch's CPU generator and each CUDA device's, NumPy's
    global MT19937 and Python's ``random``."""
    tensors = {"rng/torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng/cuda/{i}"] = state
    kind, keys, pos, has_gauss, cached = np.random.get_state()  # noqa: NPY002 - the legacy global generator users seed
    tensors["rng/numpy"] = torch.from_numpy(np.asarray(keys, dtype=np.int64))
    version, internal, gauss_next = random.getstate()
    tensors["rng/python"] = torch.tensor(internal, dtype=torch.int64)
    info = {"numpy": {"kind": kind, "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
            "python": {"version": version, "gauss_next": gauss_next}}
    return tensors, info


def restore_rng(tensors: dict, info: dict) -> None:
    """Set every generator back to the state :func:`rng_state_tensors` recorded (CUDA devices that exist)."""
    torch.set_rng_state(tensors["rng/torch"])
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            if f"rng/cuda/{i}" in tensors:
                torch.cuda.set_rng_state(tensors[f"rng/cuda/{i}"], i)
    n = info["numpy"]
    keys = tensors["rng/numpy"].numpy().astype(np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))  # noqa: NPY002
    p = info["python"]
    random.setstate((p["version"], tuple(int(v) for v in tensors["rng/python"].tolist()), p["gauss_next"]))


def _cpu(t: torch.Tensor) -> torch.Tensor:
    # a copy of its own: safetensors refuses tensors that share storage (a tied head shares the embedding's)
    return t.detach().to("cpu", copy=True).contiguous()


def save_checkpoint(run_dir, step: int, model, optimizer, info: dict, keep: int) -> Path:
    """Write the checkpoint after ``step`` steps of ``model`` (its ``state_dict``, buffers included) and
    ``optimizer`` (its per-parameter state) with ``info`` (configs, data position, versions …) added to the JSON,
    durably (module docstring); then delete all but the ``keep`` newest. Returns the JSON's path."""
    from safetensors.torch import save

    run_dir = Path(run_dir)
    tensors = {f"model/{k}": _cpu(v) for k, v in model.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim/{index}/{key}"] = _cpu(value)
    rng_tensors, rng_info = rng_state_tensors()
    tensors.update(rng_tensors)
    blob = save(tensors, metadata={"format": FORMAT, "step": str(step)})
    name = f"ckpt-{step:08d}"
    _write_durable(run_dir / f"{name}.safetensors", blob)
    record = {"format": FORMAT, "step": step, "tensors_file": f"{name}.safetensors",
              "sha256": hashlib.sha256(blob).hexdigest(), "rng": rng_info, **info}
    path = run_dir / f"{name}.json"
    _write_durable(path, (json.dumps(record, indent=1, allow_nan=False) + "\n").encode("utf-8"))
    for old in list_checkpoints(run_dir)[:-keep]:
        for f in (old, old.with_suffix(".safetensors")):
            f.unlink(missing_ok=True)
    return path


def list_checkpoints(run_dir) -> list[Path]:
    """The checkpoint JSONs of a run directory, oldest first."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    return sorted((p for p in run_dir.iterdir() if _NAME.match(p.name)), key=lambda p: int(p.name[5:-5]))


def latest_checkpoint(run_dir) -> Path | None:
    """The newest checkpoint JSON of ``run_dir``, or None."""
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def _normalised(stored: dict, current: dict, what: str) -> dict:
    """``stored`` (a config dict from a checkpoint) completed with the fields a later version added, where
    ``current`` holds them at their defaults: an older checkpoint that lacks a field was written with its default.
    Fields unknown now are kept, and differ."""
    defaults = _field_defaults(what)
    added = {k: v for k, v in current.items() if k not in stored and k in defaults and v == defaults[k]}
    return {**added, **stored}


@functools.cache
def _field_defaults(what: str) -> dict:
    from dataclasses import fields

    from ..model.config import TransformerConfig
    from .config import TrainConfig

    return {f.name: f.default for f in fields(TransformerConfig if what == "model" else TrainConfig)}


def _differences(a: dict, b: dict) -> list[str]:
    return [f"{k} {a.get(k)!r} ≠ {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def load_checkpoint(path, model_config: dict | None = None, expected_shapes: dict | None = None) -> Checkpoint:
    """Read and check the checkpoint whose JSON is ``path``: its format, its tensors file's SHA-256, its model config
    against ``model_config`` (a dict; None: not checked) and its model tensors' names and shapes against
    ``expected_shapes`` (name → shape, a model's ``state_dict``). ``CheckpointError`` with one line saying what
    is wrong otherwise. Nothing is unpickled: the JSON is parsed, the tensors are ``safetensors``."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    path = Path(path)
    info = read_json(path, CheckpointError, f"checkpoint {path} does not exist",
                     f"checkpoint {path} is unreadable or truncated")
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a sigprop checkpoint (format {FORMAT} expected)")
    for key, kind in (("step", int), ("tensors_file", str), ("sha256", str), ("model_config", dict), ("rng", dict)):
        if not isinstance(info.get(key), kind) or isinstance(info.get(key), bool):
            raise CheckpointError(f"checkpoint {path} lacks a valid {key!r}: truncated or edited")
    tensors_path = path.parent / Path(info["tensors_file"]).name
    try:
        blob = tensors_path.read_bytes()
    except OSError:
        raise CheckpointError(f"checkpoint {path}: its tensors file {tensors_path.name} is missing") from None
    if hashlib.sha256(blob).hexdigest() != info["sha256"]:
        raise CheckpointError(f"checkpoint {path}: {tensors_path.name} does not match its SHA-256 (truncated, "
                              "corrupted or modified)")
    try:
        tensors = load(blob)
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"checkpoint {path}: {tensors_path.name} is not a valid safetensors file "
                              f"({str(err).splitlines()[0][:120]})") from None
    if model_config is not None:
        stored = _normalised(info["model_config"], model_config, "model")
        if stored != model_config:
            diff = _differences(stored, model_config)
            raise CheckpointError(f"checkpoint {path} was written for another model: {'; '.join(diff[:3])}")
    if expected_shapes is not None:
        have = {k[len("model/"):]: tuple(v.shape) for k, v in tensors.items() if k.startswith("model/")}
        want = {k: tuple(v) for k, v in expected_shapes.items()}
        if have != want:
            missing = sorted(set(want) - set(have))
            extra = sorted(set(have) - set(want))
            shape = sorted(k for k in set(have) & set(want) if have[k] != want[k])
            what = (f"missing {missing[0]}" if missing else f"unexpected {extra[0]}" if extra else
                    f"{shape[0]} has shape {have[shape[0]]}, the model {want[shape[0]]}")
            raise CheckpointError(f"checkpoint {path} does not fit the model: {what}")
    for key in ("rng/torch", "rng/numpy", "rng/python"):
        if key not in tensors:
            raise CheckpointError(f"checkpoint {path} lacks the random state {key}")
    return Checkpoint(info["step"], info, tensors)


def model_state(checkpoint: Checkpoint) -> dict:
    """The model's ``state_dict`` held in ``checkpoint``."""
    return {k[len("model/"):]: v for k, v in checkpoint.tensors.items() if k.startswith("model/")}


def optimizer_state(checkpoint: Checkpoint, optimizer) -> dict:
    """``optimizer``'s ``state_dict`` with the per-parameter state of ``checkpoint`` (the parameter groups are the
    optimiser's own: they follow from the configs, which the checkpoint has been checked against).
    ``CheckpointError`` when the state does not fit the optimiser's parameters."""
    fresh = optimizer.state_dict()
    n_params = sum(len(g["params"]) for g in fresh["param_groups"])
    state: dict[int, dict] = {}
    for key, value in checkpoint.tensors.items():
        if not key.startswith("optim/"):
            continue
        _, index, name = key.split("/", 2)
        if not index.isdigit() or int(index) >= n_params:
            raise CheckpointError(f"checkpoint's optimiser state names parameter {index}, the optimiser has "
                                  f"{n_params}")
        state.setdefault(int(index), {})[name] = value
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for index, values in state.items():
        for name, value in values.items():
            if value.dim() and tuple(value.shape) != tuple(params[index].shape):
                raise CheckpointError(f"checkpoint's optimiser state {index}/{name} has shape {tuple(value.shape)}, "
                                      f"its parameter {tuple(params[index].shape)}")
    return {"state": state, "param_groups": fresh["param_groups"]}


def restore_model(path, model, model_config, data_meta: dict, train_config=None) -> Checkpoint:
    """Load the checkpoint whose JSON is ``path`` into ``model`` after every check: :func:`load_checkpoint` against
    ``model_config`` and the model's tensors, the data it was trained on against ``data_meta`` (the corpus, its
    tokenizer or the images changed since?), and with ``train_config`` the training config it was written under.
    Returns the checkpoint (for the optimiser's state and the generators'); ``CheckpointError`` otherwise."""
    ck = load_checkpoint(path, model_config.to_dict(), {k: tuple(v.shape) for k, v in model.state_dict().items()})
    if train_config is not None:
        stored = ck.info.get("train_config")
        current = train_config.to_dict()
        if not isinstance(stored, dict) or _normalised(stored, current, "train") != current:
            diff = _differences(stored if isinstance(stored, dict) else {}, current)
            raise CheckpointError(f"checkpoint {path} was written under another training config: "
                                  f"{'; '.join(diff[:3])}")
    if not same_data(ck.info.get("data"), data_meta):
        raise CheckpointError(f"checkpoint {path} was trained on other data (the corpus, its tokenizer or the images "
                              "changed since)")
    model.load_state_dict(model_state(ck))
    return ck


__all__ += ["model_state", "optimizer_state", "restore_model"]
