"""Shared test helpers: Monte Carlo estimates with standard errors, and tolerances derived from them."""

from __future__ import annotations

import math

import numpy as np
import torch

#: Two-sided z for a per-assertion false-alarm rate of ~1e-5 (many assertions run in one session).
Z = 4.4


def mc_mean(samples: torch.Tensor | np.ndarray, groups: int = 32) -> tuple[float, float]:
    """Mean of i.i.d. ``samples`` (flattened) and its standard error from ``groups`` independent batch means."""
    x = torch.as_tensor(samples, dtype=torch.float64).reshape(-1)
    n = (x.numel() // groups) * groups
    means = x[:n].reshape(groups, -1).mean(dim=1)
    return float(means.mean()), float(means.std() / math.sqrt(groups))


def assert_close_mc(pred: float, est: float, se: float, z: float = Z, model_err: float = 0.0, what: str = ""):
    """Assert |pred − est| ≤ z·SE + model_err, where model_err is a rule's *documented* approximation bound."""
    tol = z * se + model_err
    assert abs(pred - est) <= tol, f"{what}: predicted {pred:.6g}, measured {est:.6g} ± {se:.2g} (tol {tol:.3g})"


def draws_mean_se(looks: list[dict], key, quantity: str) -> tuple[float, float]:
    """Mean of a predicted ``quantity`` at ``key`` over predictions drawn with different attention seeds (``looks``:
    their ``Profile.lookup()``), and its standard error (0 for one draw, or where the prediction does not sample)."""
    vals = np.array([getattr(lk[key], quantity) for lk in looks], dtype=np.float64)
    return float(vals.mean()), (float(vals.std(ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else 0.0)


def lognormal_seed_profiles(rng: np.random.Generator, sds: dict[int, float], seeds: int):
    """Per seed, a measured profile of layers ``sds`` whose gradient variance is log-normal with log-sd ``sds[layer]``
    and whose forward variance barely varies (sd 0.01): stand-ins for a seed average whose mean is skewed."""
    from sigprop.core.profile import Profile, Row

    return [Profile("measured", {}, tuple(Row(layer, "layer", 0.0, 1.0 + 0.01 * rng.standard_normal(), 0.5,
                                              float(rng.lognormal(0.0, s)), 0.3) for layer, s in sds.items()), {})
            for _ in range(seeds)]


class CliResult:
    """What a command-line run left: its exit status, standard output and error, and both together."""

    def __init__(self, exit_code: int, stdout: str, stderr: str):
        self.exit_code, self.stdout, self.stderr = exit_code, stdout, stderr
        self.output = stdout + stderr


def run_cli(args: list[str]) -> CliResult:
    """Run ``sigprop ARGS`` in this process through its one entry point (:func:`sigprop.cli.main`, with its error
    handler), capturing what it writes."""
    import contextlib
    import io

    from sigprop.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return CliResult(code, out.getvalue(), err.getvalue())


def processes_mentioning(text: str) -> list[str]:
    """The command lines of the live processes that contain ``text``, read whole from /proc (``ps`` cuts a line
    at 80 columns when its output is not a terminal)."""
    from pathlib import Path

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        line = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        if text in line and state != "Z":  # a zombie has exited; only its parent's wait is missing
            found.append(line)
    return found


def mha_module_moments(d, dk, L, sigma_qk2, r, n_heads=1, n_kv_heads=None, rope=None, causal=False, p=0.0,
                       draws=64, seed=0, **module_kwargs) -> dict:
    """Monte Carlo of the real :class:`~sigprop.components.attention.MultiHeadAttention` (fresh weights per draw,
    σ²_q = σ²_k = ``sigma_qk2``, σ²_v = 1/d): Gaussian input of 8 sequences of L tokens with shared part r, output
    gradient with token correlation 0.3 and independent units. {"fv", "fc", "gv", "gc": (mean, se)} over draws: the
    forward and input-gradient variance and mean token covariance (over ordered pairs). ``module_kwargs`` go to the
    module (e.g. ``qk_norm_eps``, ``rotary_fraction``)."""
    from sigprop.components.attention import MultiHeadAttention

    gen = torch.Generator().manual_seed(seed)
    out = {k: [] for k in ("fv", "fc", "gv", "gc")}
    width = n_heads * dk
    for _ in range(draws):
        mha = MultiHeadAttention(d, n_heads, dk, sigma_q=math.sqrt(sigma_qk2), sigma_k=math.sqrt(sigma_qk2),
                                 sigma_v=1 / math.sqrt(d), dropout_p=p, causal=causal, n_kv_heads=n_kv_heads,
                                 rope=rope, **module_kwargs).double()
        mha.reset_parameters(generator=gen)
        x = (math.sqrt(r) * torch.randn(8, 1, d, generator=gen, dtype=torch.float64)
             + math.sqrt(1 - r) * torch.randn(8, L, d, generator=gen, dtype=torch.float64)).requires_grad_(True)
        y = mha(x)
        gy = (math.sqrt(0.3) * torch.randn(8, 1, width, generator=gen, dtype=torch.float64)
              + math.sqrt(0.7) * torch.randn(8, L, width, generator=gen, dtype=torch.float64))
        gx, = torch.autograd.grad(y, x, gy)
        for key, t in (("f", y.detach()), ("g", gx)):
            m2 = (t * t).mean()
            tot = t.sum(dim=1)
            out[key + "v"].append(float(m2))
            out[key + "c"].append(float(((tot * tot).mean() - m2 * L) / (L * (L - 1))))
    return {k: (float(np.mean(v)), float(np.std(v, ddof=1) / math.sqrt(len(v)))) for k, v in out.items()}
