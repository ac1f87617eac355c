"""The demo's training table keeps a run that crashed (its record in failed.json), instead of leaving it out."""

from __future__ import annotations

import dataclasses
import json

from sigprop.experiments.runner import FAILED_FILE, RunResult
from sigprop.report.demo_training import _failed, _runs


def test_a_crashed_run_is_in_the_table_with_its_fate(tmp_path):
    runs = _runs()
    crashed = runs[0]
    (tmp_path / crashed.run_id).mkdir()
    record = RunResult(crashed.run_id, crashed.model_name, crashed.seed, crashed.lr, crashed.tuning, "failed",
                       "exit status 1: out of memory", None, 10, 100, 1.0, [])
    (tmp_path / crashed.run_id / FAILED_FILE).write_text(json.dumps(dataclasses.asdict(record)))
    (missing,) = _failed(runs, tmp_path, [])
    assert (missing.run_id, missing.fate) == (crashed.run_id, "failed")
    assert _failed(runs, tmp_path, [missing]) == []  # a run the runner returned is not added twice


def test_a_signal_stops_the_demo_s_training_as_it_stops_every_command(tmp_path, monkeypatch):
    """SIGTERM stopping the runs was reported as Ctrl-C (exit 130, "interrupted"); it is "terminated", 143."""
    import signal

    import pytest

    import sigprop.experiments.runner as runner
    from sigprop.core.errors import Terminated
    from sigprop.report.demo_training import run_demo_training

    monkeypatch.setattr(runner, "unigram_loss", lambda *args: 6.0)
    for sig, raised in ((signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)):
        monkeypatch.setattr(runner, "execute", lambda *args, sig=sig, **kwargs: ([], sig))
        with pytest.raises(raised):
            run_demo_training(tmp_path)
