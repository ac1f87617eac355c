"""The monitor's files under its ``log_dir``: ``track.jsonl`` (a line per point, :meth:`TrackPoint.to_json
<sigprop.monitor.point.TrackPoint.to_json>`) and ``track-prediction.json`` (the theory's columns at the first
point, with its ``step``). ``sigprop train`` runs write the same files into their run directory."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.jsonio import finite_or_null, read_jsonl, write_json_atomic, write_text_atomic
from .point import Columns, TrackPoint

__all__ = ["TRACK_FILE", "PREDICTION_FILE", "TrackFile", "read_track", "read_prediction"]

TRACK_FILE = "track.jsonl"
PREDICTION_FILE = "track-prediction.json"


def read_track(log_dir) -> list[dict]:
    """The points of a monitored run (its ``track.jsonl``; a line cut by a killed process is skipped)."""
    return read_jsonl(Path(log_dir) / TRACK_FILE)


def read_prediction(log_dir) -> dict | None:
    """The theory's columns of a monitored run (``track-prediction.json``), or ``None`` where it has none."""
    try:
        return json.loads((Path(log_dir) / PREDICTION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


class TrackFile:
    """Writes the points into ``log_dir`` (module docstring). A new monitor starts an empty file; with
    ``resume_step`` the lines after that step (written by a killed run after its checkpoint) are dropped and the
    rest kept (:attr:`kept`)."""

    def __init__(self, log_dir, resume_step: int | None = None):
        self.log_dir = Path(log_dir)
        self.path = self.log_dir / TRACK_FILE
        self.kept: list[TrackPoint] = []
        if resume_step is None:  # a new run: an earlier run's points and theory in this folder are not its own
            self.path.unlink(missing_ok=True)
            (self.log_dir / PREDICTION_FILE).unlink(missing_ok=True)
        else:
            lines = [r for r in read_track(self.log_dir) if r["step"] <= resume_step]
            write_text_atomic(self.path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in lines))
            self.kept = [TrackPoint.from_json(r) for r in lines]

    def theory(self, columns: Columns, step: int) -> None:
        write_json_atomic(self.log_dir / PREDICTION_FILE, finite_or_null({"step": step, **columns.to_dict()}))

    def point(self, point: TrackPoint) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(point.to_json(), allow_nan=False) + "\n")

    def close(self) -> None:
        pass
