"""The progress lines written where standard error is no terminal: a task's start, its quarters or every
LINE_EVERY_S seconds, and its end once."""

from __future__ import annotations

from sigprop.cli.terminal import _Lines


def test_lines_are_rate_limited_and_say_the_end_once(capsys):
    lines = _Lines()
    unknown = lines.task("build the batch")  # no total: a line when it starts, then at most every LINE_EVERY_S
    for _ in range(100):
        unknown(1)
    counted = lines.task("predict", 8)
    for _ in range(12):  # past its total: the end is said once
        counted(1)
    said = capsys.readouterr().err.splitlines()
    assert sum("build the batch" in line for line in said) == 1
    assert [line.split("] ")[1] for line in said if "predict" in line] == [
        "predict: 0/8", "predict: 2/8", "predict: 4/8", "predict: 6/8", "predict: 8/8"]
