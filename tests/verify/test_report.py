"""sigprop.verify.report: the targets `--strict` judges, and the tables."""

from __future__ import annotations

import numpy as np

from sigprop.verify.harness import ComponentResult, run_component
from sigprop.verify.registry import load_spec
from sigprop.verify.report import markdown_table, meets_targets


def test_a_rule_that_answers_nan_fails_the_targets_instead_of_being_left_out():
    spec = load_spec("dropout")
    result = run_component(spec, quick=True, n_configs=4, seed=1, replicates=8)
    clean = {"components": {"dropout": result.summary()}}
    errors = {q: e.copy() for q, e in result.errors.items()}
    errors["var"][:2] = np.nan  # the rule answered NaN at two configurations
    broken = ComponentResult(result.spec, result.params, result.predicted, result.measured, errors, result.noise,
                             result.seconds)
    summary = broken.summary()
    assert summary["var"]["not_finite"] == 2 and summary["var"]["n_configs"] == 2
    loose = dict(p50=1e9, p99=1e9)  # whatever the errors, only the NaN can fail
    assert meets_targets(clean, **loose) and not meets_targets({"components": {"dropout": summary}}, **loose)
    assert "(2 not finite)" in markdown_table({"components": {"dropout": summary}})
    assert "not finite" not in markdown_table(clean)


def test_an_approximation_s_rows_keep_their_name_in_the_terminal_table():
    """rich read "[kedia]" in "attention[kedia]" as markup and printed the row as "attention"."""
    from rich.console import Console

    from sigprop.verify.report import render_table

    class Report:
        def to_json(self):
            row = {"p50": 0.5, "p90": 1.0, "p99": 2.0, "noise_p50": 0.1, "noise_p99": 0.2, "n_configs": 4}
            return {"components": {"attention[kedia]": {"var": row}}}

    console = Console(width=200, record=True)
    console.print(render_table(Report(), 1.0, 5.0))
    assert "attention[kedia]" in console.export_text()
