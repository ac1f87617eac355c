"""``sigprop env``: the versions, threads and devices sigprop will use (:func:`sigprop.report.environment.
environment_report`); ``sigprop env`` prints the same until the model doctor takes its name."""

from __future__ import annotations

from .options import JsonOut
from .terminal import console, note

__all__ = ["env_command", "doctor_command"]


def env_command(json_path: JsonOut = None):
    """Print the versions, threads and devices sigprop will use, and check that its dependencies import."""
    from ..core.jsonio import write_json_atomic
    from ..core.outputs import check_output_path
    from ..report.environment import environment_report

    if json_path is not None:
        check_output_path(json_path, "--json")
    report = environment_report()
    for key, value in report.items():
        console.print(f"[bold]{key}[/bold]: {value}")
    if json_path is not None:
        console.print(f"JSON: {write_json_atomic(json_path, report)}")


def doctor_command(json_path: JsonOut = None):
    """The environment report, now `sigprop env` (this name is kept for the model doctor)."""
    note("the environment report is `sigprop env` now; `sigprop env` will diagnose a model")
    env_command(json_path)
