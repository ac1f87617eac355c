"""How far the bidirectional closed form of attention holds against the sampled rule, across the score variance s².

    python bench/attention_closed_form_range.py [--heads 256]

Configuration: the presets' attention (d_in = 256, d_k = 64, dropout 0.1) at L = 32 and 128, Gaussian input of
variance 1 and token correlation 0, the closed form ("exact") against the sampled rule on fresh heads; the last rows
without dropout at s² = 6. Each row: the closed form's relative gap to the sampled rule (in percent) with the
sample's standard error in brackets, for the forward variance, the forward covariance and the gradient variance for
an independent (r_g = 0) and a shared (r_g = 1) output gradient ("out of domain" where the closed form's value is
not a variance). "auto" takes the closed form up to
``CLOSED_FORM_MAX_S2`` only (sigprop.components.attention). Written to
docs/results/bench-attention-closed-form-range.txt.
"""

from __future__ import annotations

import argparse
import math

from sigprop.components.attention import CLOSED_FORM_MAX_S2, attention_backward, attention_forward
from sigprop.components.attention_sampled import sample_attention
from sigprop.core.moments import GradMoments, Moments

D, DK, R = 256, 64, 0.0


def qk_var(s2: float) -> float:
    """σ²_q = σ²_k that give a mean score variance s² on this input (s² = (1 − r) d² σ²_q σ²_k at σ² = 1)."""
    return math.sqrt(s2 / ((1.0 - R) * D * D))


def _gap(closed: float, sampled: float, se: float) -> str:
    """The closed form's gap to the sampled value in percent, with the sample's standard error in brackets."""
    return f"{100 * (closed / sampled - 1.0):+.2f} ({100 * se / sampled:.2f})"


def row(L: int, s2: float, p: float, heads: int) -> str:
    """One table row: the closed form's gaps to the sampled rule at (L, s², dropout p)."""
    sq, sv, m = qk_var(s2), 1.0 / D, Moments(0.0, 1.0, R)
    s = sample_attention(1.0, R, D, DK, L, sq, sq, sv, p, heads=heads, seed=1)
    f = attention_forward(m, D, DK, L, sq, sq, sv, p, approx="exact")
    cells = [_gap(f.var, s.fwd_var, s.fwd_var_se), _gap(f.var * f.corr, s.fwd_cov, s.fwd_cov_se)]
    for rg, sampled, se in ((0.0, s.in_var, s.in_var_se), (1.0, s.sh_var, s.sh_var_se)):
        try:
            b = attention_backward(GradMoments(1.0, rg), m, D, DK, L, sq, sq, sv, p, approx="exact")
        except ValueError as e:  # the closed form left its domain (a negative variance)
            cells.append(f"out of domain: {str(e).split(' (got')[0]}")
        else:
            cells.append(_gap(b.var, sampled, se))
    return f"| {L} | {s2:g} | {p:g} | {' | '.join(cells)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=256)
    args = parser.parse_args()
    print(f"bidirectional closed form vs sampled rule ({args.heads} heads), d_in {D}, d_k {DK}, r {R:g}; "
          f"gaps in % (SE); CLOSED_FORM_MAX_S2 = {CLOSED_FORM_MAX_S2:g}")
    print("| L | s² | dropout | fwd var | fwd cov | grad var r_g=0 | grad var r_g=1 |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for L in (32, 128):
        for s2 in (0.3, 0.75, 1.2, 2.0, 3.0):
            print(row(L, s2, 0.1, args.heads), flush=True)
    for L in (32, 128):
        print(row(L, 6.0, 0.0, args.heads), flush=True)


if __name__ == "__main__":
    main()
