"""Large-depth laws of the APJN recurrences against Alekseev's asymptotics (Results 3.3–3.5), in the ViT setting
(σ_21, σ_OV) = (0.61, 0.31), (q⁰, p⁰) = (1, 0.2). Theory only (no models); prints:

* c*: the stable root of Eq. 15 and its residual;
* pre-LN: the least-squares slope of log 𝒥^{B,b} against log b over b = 1…B−1 at B = 128, and the local slope of
  log 𝒥^{b,0} (b → 4b) at larger b, beside ζ (Eq. 17);
* Derf / DyT: the effective scale (d log 𝒥^{b,0} / d√b)² between b = 2500 and 10⁴ blocks, beside λ⁻¹ (Eq. 19),
  and the ratio of the recurrence's growth log 𝒥^{b,0} over b ∈ [2500, 10⁴] to Eq. 18's (√(10⁴) − √2500)·√λ⁻¹.

Run: ``python bench/apjn_asymptotics.py`` (~1.5 minutes, mostly DyT's quadrature).
Results: docs/results/apjn-asymptotics.txt.
"""

from __future__ import annotations

import math

import numpy as np

from sigprop.apjn.asymptotics import c_star, lambda_inv, p_tilde_limit, zeta
from sigprop.apjn.recurrence import apjn_profile, kappa

S21, SOV, Q0, P0 = 0.61, 0.31, 1.0, 0.2


def main():
    c = float(c_star(sigma_21=S21, sigma_ov=SOV, norm="erf"))
    pt = float(p_tilde_limit(c, "erf"))
    rhs = (0.5 * S21**2 * float(kappa(pt)) + SOV**2 * pt) / (0.5 * S21**2 + SOV**2 * pt)
    print(f"c* (Eq. 15, tanh-like) = {c:.6f}; residual c* − rhs = {c - rhs:.2e}")

    z = float(zeta(sigma_21=S21, sigma_ov=SOV))
    prof = apjn_profile(sigma_21=S21, sigma_ov=SOV, blocks=128, norm="layernorm", q0=Q0, p0=P0)
    b = np.arange(1, 128)
    slope = -np.polyfit(np.log(b), prof.log_backward()[1:128], 1)[0]
    print(f"pre-LN, B = 128: slope of log J^{{B,b}} vs log b over b = 1..127 = {slope:.4f}; ζ = {z:.4f} "
          f"({100 * (slope / z - 1):+.1f}%)")
    big = apjn_profile(sigma_21=S21, sigma_ov=SOV, blocks=16384, norm="layernorm", q0=Q0, p0=P0).log_forward()
    for lo in (256, 1024, 4096):
        print(f"  local slope of log J^{{b,0}}, b = {lo} → {4 * lo}: {(big[4 * lo] - big[lo]) / math.log(4):.4f}")

    lo, hi = 2500, 10_000
    for norm, phi, alphas in (("Derf", "erf", (0.5, 1.0, 1.5)), ("DyT", "tanh", (1.0,))):
        for a in alphas:
            lf = apjn_profile(sigma_21=S21, sigma_ov=SOV, blocks=hi, norm=phi, alpha=a, q0=Q0, p0=P0).log_forward()
            li = float(lambda_inv(sigma_21=S21, sigma_ov=SOV, norm=phi, alpha=a))
            growth = lf[hi] - lf[lo]
            law = (math.sqrt(hi) - math.sqrt(lo)) * math.sqrt(li)
            eff = (growth / (math.sqrt(hi) - math.sqrt(lo))) ** 2
            print(f"{norm} α={a:g}: λ⁻¹ = {li:.4f}; recurrence (d log J / d√b)² over b ∈ [{lo}, {hi}] = {eff:.4f} "
                  f"(ratio {eff / li:.3f}); growth / Eq. 18's = {growth / law:.3f}")


if __name__ == "__main__":
    main()
