"""Several processes and signals: two CPU processes under torchrun (gloo) train the same model as one process at the
same global batch; SIGTERM and SIGINT write a checkpoint and exit cleanly, leaving no process behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sigprop.train.checkpoint import latest_checkpoint
from tests.helpers import processes_mentioning, run_cli

from .conftest import tiny_args

ROOT = Path(__file__).resolve().parents[2]
#: float32 addition in another order: a loss of ~6 summed over 2 × 32 tokens agrees to a few ulp (1.2e-7) per step,
#: and the difference grows slowly with the steps; 1e-5 is ~100 ulp.
RTOL = 1e-5


def _losses(run_dir) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _torchrun(n: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", "-m", "sigprop",
            *args]


def _wait_for_steps(run_dir: Path, n: int, proc, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    metrics = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= n:
            return
        assert proc.poll() is None, "the run ended early"
        time.sleep(0.02)
    raise AssertionError(f"no {n} steps within {timeout} s")


@pytest.mark.long
@pytest.mark.parametrize("arch", ["encoder", "decoder"])
def test_two_processes_train_as_one_at_the_same_global_batch(corpus, tmp_path, arch):
    # encoder: masked-LM labels fall unevenly between the processes, which the loss's global normalisation absorbs
    args = tiny_args(corpus, "steps=6", "eval_every=3", model=(f"arch={arch}", "dropout=0"))
    one, two = tmp_path / "one", tmp_path / "two"
    assert run_cli(["train", *args, "--out", str(one)]).exit_code == 0  # one process: this one
    done = subprocess.run(_torchrun(2, "train", *args, "--out", str(two)), capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads((two / "run.json").read_text())["world_size"] == 2
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == 6
    assert all(abs(x - y) <= RTOL * abs(x) for x, y in zip(a, b, strict=True)), (a, b)
    assert done.stdout.count("run directory:") == 1  # one report per run, rank 0's


@pytest.mark.long
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_writes_a_checkpoint_and_exits_cleanly(corpus, tmp_path, sig, status):
    out = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "sigprop", "train",
                             *tiny_args(corpus, "steps=100000", "checkpoint_every=100000"), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        _wait_for_steps(out, 5, proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err
    assert "Traceback" not in err and "checkpoint written at step" in err
    last_step = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert latest_checkpoint(out).name == f"ckpt-{last_step:08d}.json"


@pytest.mark.long
def test_sigterm_to_torchrun_checkpoints_and_leaves_no_process(corpus, tmp_path):
    out = tmp_path / "ddp-stopped"
    proc = subprocess.Popen(_torchrun(2, "train", *tiny_args(corpus, "steps=100000", "checkpoint_every=100000"),
                                      "--out", str(out)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    try:
        _wait_for_steps(out, 5, proc)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    last_step = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert latest_checkpoint(out).name == f"ckpt-{last_step:08d}.json"
    deadline = time.monotonic() + 10
    while processes_mentioning(str(out)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(str(out)) == []


@pytest.mark.long
def test_a_checkpoint_of_one_process_resumes_on_two(corpus, tmp_path):
    # the global batches are the same whatever the world size; with dropout off only the reduction order changes
    args = tiny_args(corpus, "steps=8", "checkpoint_every=4", model=("dropout=0",))
    one = tmp_path / "one"
    assert run_cli(["train", *args, "--out", str(one)]).exit_code == 0  # one process: this one
    cut = tmp_path / "cut"
    shutil.copytree(one, cut)
    for suffix in ("json", "safetensors"):
        (cut / f"ckpt-00000008.{suffix}").unlink()
    done = subprocess.run(_torchrun(2, "train", "--resume", str(cut)), capture_output=True, text=True, env=_env(),
                          timeout=300)
    assert done.returncode == 0, done.stderr
    a, b = _losses(one), _losses(cut)
    assert a[:4] == b[:4] and len(b) == 8
    assert all(abs(x - y) <= RTOL * abs(x) for x, y in zip(a[4:], b[4:], strict=True)), (a, b)
    assert json.loads((cut / "ckpt-00000008.json").read_text())["world_size"] == 2
