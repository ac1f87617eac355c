"""The diagnosis (sigprop.diagnose) of every stored comparison in docs/results/: for each, the forward variance's
change from the first layer to the last, the gradient variance's from the last to the first, the growth law fitted
over the middle layers and the last layer's token correlation, measured and predicted side by side.

    python bench/diagnosis_presets.py --docs docs/results > docs/results/diagnosis-presets.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sigprop.analysis.comparison import comparison_side
from sigprop.analysis.diagnosis import diagnose


def law(finding) -> str:
    if finding.law is None or finding.verdict == "bounded":
        return ""
    if finding.law.kind == "power":
        return f", ∝ l^{finding.law.rate:.2f}"
    if finding.law.kind == "exponential":
        factor = 1.0 / finding.law.rate if finding.quantity == "grad_var" else finding.law.rate
        return f", ×{factor:.4f}/layer"
    return ", flat middle"


def cell(measured, predicted) -> str:
    if measured.quantity == "fwd_corr":
        return f"{measured.change:.4f} / {predicted.change:.4f}"
    return (f"{measured.verdict} ×{measured.change:.3g}{law(measured)} / "
            f"{predicted.verdict} ×{predicted.change:.3g}{law(predicted)}")


#: The page's title and the command that writes it, above the table.
HEADER = ("# The diagnosis of every stored comparison\n\n"
          "`python bench/diagnosis_presets.py --docs docs/results > docs/results/diagnosis-presets.md`: each stored "
          "comparison's verdicts (`sigprop.diagnose`), measured against predicted.\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default="docs/results")
    args = ap.parse_args()
    print(HEADER)
    print("| comparison | stack | forward variance, first → last (measured / theory) | gradient variance, last → "
          "first (measured / theory) | last-layer token correlation (measured / theory) |")
    print("|---|---|---|---|---|")
    for path in sorted(Path(args.docs).glob("compare-*.json")):
        data = json.loads(path.read_text())
        measured, predicted = (diagnose(comparison_side(data, kind)) for kind in ("measured", "predicted"))
        theory = {(f.stack, f.quantity): f for f in predicted.findings}
        by_stack: dict[str, list[str]] = {}
        for f in measured.findings:
            by_stack.setdefault(f.stack, []).append(cell(f, theory[(f.stack, f.quantity)]))
        for stack, cells in by_stack.items():
            print(f"| `{path.stem.removeprefix('compare-')}` | {stack or '–'} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
