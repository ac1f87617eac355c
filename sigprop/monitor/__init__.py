"""Signal propagation watched while a model trains, in any loop: :class:`Monitor` (every layer's statistics on a
fixed probe batch every K steps, their diagnosis, the theory beside them, warnings on a vanishing gradient or
collapsing tokens), its points (:class:`TrackPoint`), where they go (``track.jsonl``, TensorBoard, W&B) and the
figure of a monitored run (:func:`plot_track`). ``sigprop train`` tracks through it, and the Hugging Face and
Lightning callbacks (:mod:`sigprop.integrations`) wrap it."""

from __future__ import annotations

from ..core.lazy import lazy_names

_PUBLIC = {
    "Monitor": "monitor", "TrackPoint": "point", "Columns": "point", "QUANTITIES": "point", "Alert": "alerts",
    "AlertKind": "alerts", "TRACK_FILE": "track_file", "PREDICTION_FILE": "track_file", "read_track": "track_file",
    "TrackFile": "track_file", "plot_track": "plot",
}

__all__ = list(_PUBLIC)

__getattr__, __dir__ = lazy_names(__name__, _PUBLIC)
