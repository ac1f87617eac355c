"""Exact resume: a run killed with SIGKILL at an arbitrary step and resumed from its last checkpoint logs the same
losses, bit for bit, as the same run uninterrupted (CPU, dropout on, so the dropout masks are restored too)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from sigprop.train.checkpoint import latest_checkpoint
from tests.helpers import run_cli

from .conftest import tiny_args

STEPS = 200


def _losses(run_dir) -> list[float]:
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.long
def test_a_run_killed_with_sigkill_resumes_bit_for_bit(corpus, tmp_path):
    args = tiny_args(corpus, f"steps={STEPS}", "checkpoint_every=7", "keep_checkpoints=2")
    full = tmp_path / "full"
    done = run_cli(["train", *args, "--out", str(full)])  # in this process: only the killed run needs its own
    assert done.exit_code == 0, done.stderr

    killed = tmp_path / "killed"
    env_cmd = [sys.executable, "-m", "sigprop", "train", *args, "--out", str(killed)]
    proc = subprocess.Popen(env_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # kill once two checkpoints exist and some steps were logged past them
            ck = latest_checkpoint(killed)
            metrics = killed / "metrics.jsonl"
            lines = len(metrics.read_text().splitlines()) if metrics.exists() else 0
            if ck is not None and int(ck.stem.split("-")[1]) >= 14 and lines % 7 != 0:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    stopped_at = int(latest_checkpoint(killed).stem.split("-")[1])
    assert stopped_at < STEPS, "the run finished before it was killed: the test needs more steps"
    logged = len(_losses(killed))
    assert logged >= stopped_at

    resumed = run_cli(["train", "--resume", str(killed)])
    assert resumed.exit_code == 0, resumed.stderr
    assert _losses(killed) == _losses(full)  # bit for bit, the lines logged past the checkpoint replaced
    assert len(_losses(full)) == STEPS
    last_full = json.loads((full / "metrics.jsonl").read_text().splitlines()[-1])
    last_resumed = json.loads((killed / "metrics.jsonl").read_text().splitlines()[-1])
    assert last_resumed["val_loss"] == last_full["val_loss"]
    assert last_resumed["tokens"] == last_full["tokens"]
