"""``sigprop env``: the versions, threads and devices sigprop will use (:func:`sigprop.report.environment.
environment_report`)."""

from __future__ import annotations

from .options import JsonOut
from .terminal import console

__all__ = ["env_command"]


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

