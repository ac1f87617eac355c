"""Finite networks of width n and depth d, thousands at once, recording V_l = X_l X_l^T / n layer by layer.

Networks (Noci et al. 2023), all residual X_{l+1} = lambda X_l + gamma f_l(X_l), lambda^2 + gamma^2 = 1:

* ``resnet_relu``        -- Eq. 4 (Thm. 3.2): f(X) = sigma_s(X W_pre / sqrt n) sqrt(c/n) W_post, shaped ReLU;
* ``shaped_attention``   -- Eq. 1 with Eq. 9 (Thm. 4.2): f(X) = A X W_V / sqrt n,
  A = I + Softmax(Y / tau) - 11^T/m, Y = X W_Q W_K^T X^T / n, tau = tau0 sqrt(n n_k);
* ``shaped_transformer`` -- Eq. 11 (Cor. 4.3): a shaped-attention layer then a shaped-ReLU layer per block;
* ``softmax_attention``  -- Eq. 1-2 unshaped, no LayerNorm: A = Softmax(Y / sqrt n_k) (Sec. 4.1, Fig. 1);
* ``preln_attention``    -- Pre-LN (Fig. 1, Xiong et al. 2020):
  X_{l+1} = X_l + Softmax(Y'/sqrt n_k) LN(X_l) W_V / sqrt n, Y' from LN(X_l): the standard unit residual
  (lambda = gamma = 1; ``gamma`` is not used), LayerNorm without affine;
* Fig. 4 interventions  -- :func:`intervention` removes one or two of: the identity I, the centring -11^T/m, the
  temperature tau = tau0 sqrt(n n_k) (replaced by the standard sqrt(n_k)).

One head with n_k = n (the single-head block of Eq. 1), i.i.d. N(0, 1) weights scaled by 1/sqrt n.
"depth d" counts residual layers l = 1..d; a Transformer block (Eq. 11) is one layer of the depth here, as in
Cor. 4.3 where t = l/n counts blocks.

How thousands of networks are simulated exactly (distribution-preserving "Gaussian sketch"). Every weight W of a
layer is fresh and independent of X_l, and the layer uses W only through a product X W / sqrt n (or H W / sqrt n for
the post-activation H of the MLP). Conditional on X (m x n), the n columns of X W are i.i.d. N(0, X X^T), i.e.

    X W / sqrt n  =d  R G,   R R^T = X X^T / n = V,   G (m x n_out) i.i.d. N(0, 1),

jointly for the independent weights W_Q, W_K, W_V (independent G's). So each network costs m x n Gaussians per
weight and layer instead of n x n, with the same law of (X_l)_l, hence of (V_l)_l, as the network with full weight
matrices (this is an identity in distribution, not an approximation; the test file checks one layer against full
weights). The real module maths is then applied to these products: :func:`sigprop.components.shaped_attention.
shaped_attention` is called with input R (width m) and batched weights G (its x @ w_q is R G_Q =d X W_Q / sqrt n),
and the activation is :class:`sigprop.components.shaped_relu.ShapedReLU` (``normalize=True``: sqrt(c) sigma_s,
equal to Eq. 4's sqrt(c/n) post-scaling by positive homogeneity). The residual stream X itself is kept at full
width n. R is the eigen-root Q diag(sqrt(max(w, 0))) (valid for singular V, e.g. after rank collapse).

Networks are processed in chunks sized from a memory budget (``chunk``); within a chunk every operation is batched
over networks (the only Python loop is over layers). Randomness: one seeded ``torch.Generator`` consumed chunk after
chunk, so a result depends on (seed, chunk size). Float64 throughout.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..components.shaped_attention import shaped_attention
from ..components.shaped_relu import ShapedReLU
from ..core.validate import check_range
from .residual_mlp import check_gamma
from .shaped_attention import check_tau0
from .stopping import EIG_BOUNDS, stopping_times
from .triu import as_cov_batch, correlation

__all__ = ["Architecture", "ARCHITECTURES", "intervention", "get_architecture", "NetworkPath", "simulate_network",
           "initial_tokens", "psd_root", "equicorrelated"]


@dataclass(frozen=True)
class Architecture:
    """One residual layer's recipe. attention / mlp: which sublayers a layer has (both: a Transformer block, Eq. 11,
    attention first). identity, centre: the +I and -11^T/m of Eq. 9; shaped_tau: tau = tau0 sqrt(n n_k) (Eq. 9)
    instead of the standard sqrt(n_k) (Eq. 2); pre_ln: LayerNorm (no affine) on each branch's input;
    shaped_relu: the MLP activation is the shaped ReLU (Eq. 4, slopes 1 + c_pm/sqrt n) instead of the plain ReLU;
    unit_residual: X_{l+1} = X_l + f(X_l) (standard Pre-LN) instead of lambda X_l + gamma f(X_l)."""

    name: str
    attention: bool = False
    mlp: bool = False
    identity: bool = True
    centre: bool = True
    shaped_tau: bool = True
    pre_ln: bool = False
    shaped_relu: bool = True
    unit_residual: bool = False

    @property
    def sde_kind(self) -> str | None:
        """The covariance SDE of :func:`sigprop.sde.transformer.covariance_sde` this network converges to, if any."""
        shaped = self.identity and self.centre and self.shaped_tau and not (self.pre_ln or self.unit_residual)
        if self.attention and self.mlp:
            return "shaped_transformer" if shaped and self.shaped_relu else None
        if self.attention:
            return "shaped_attention" if shaped else None
        return "resnet_relu" if self.shaped_relu and not (self.pre_ln or self.unit_residual) else None


def intervention(identity: bool, centre: bool, shaped_tau: bool) -> Architecture:
    """Shaped attention (attention-only residual network) with some of Eq. 9's three modifications removed (Fig. 4).

    Named like the figure's legend: the kept modifications among "id", "center", "tau^2=nn_k", e.g. "id, center"
    (no temperature scaling), "only id" (tau = sqrt(n_k), no centring), "none" (plain Softmax, Eq. 2)."""
    kept = [s for s, on in (("id", identity), ("center", centre), ("tau^2=nn_k", shaped_tau)) if on]
    name = "shaped (all three)" if len(kept) == 3 else ("only " + kept[0] if len(kept) == 1 else
                                                         ", ".join(kept) if kept else "none")
    return Architecture(name=name, attention=True, identity=identity, centre=centre, shaped_tau=shaped_tau)


#: Named architectures (Noci et al. Secs. 3-4, Figs. 1, 3, 4).
ARCHITECTURES = {
    "resnet_relu": Architecture("resnet_relu", mlp=True),
    "shaped_attention": Architecture("shaped_attention", attention=True),
    "shaped_transformer": Architecture("shaped_transformer", attention=True, mlp=True),
    "softmax_attention": Architecture("softmax_attention", attention=True, identity=False, centre=False,
                                      shaped_tau=False),
    "preln_attention": Architecture("preln_attention", attention=True, identity=False, centre=False,
                                    shaped_tau=False, pre_ln=True, unit_residual=True),
    "softmax_transformer": Architecture("softmax_transformer", attention=True, mlp=True, identity=False,
                                        centre=False, shaped_tau=False, shaped_relu=False),
    "preln_transformer": Architecture("preln_transformer", attention=True, mlp=True, identity=False, centre=False,
                                      shaped_tau=False, pre_ln=True, shaped_relu=False, unit_residual=True),
}


def get_architecture(arch) -> Architecture:
    """An :class:`Architecture` or the name of one in :data:`ARCHITECTURES`; ``ValueError`` naming the choices."""
    if isinstance(arch, Architecture):
        return arch
    if arch not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {tuple(ARCHITECTURES)} or an Architecture (got {arch!r})")
    return ARCHITECTURES[arch]


def equicorrelated(m: int, rho0: float, scale: float = 1.0) -> np.ndarray:
    """V0 = scale ((1 - rho0) I + rho0 11^T): m tokens of squared norm/n = scale and pairwise correlation rho0."""
    if not isinstance(m, int) or m < 2:
        raise ValueError(f"tokens m must be an integer >= 2 (got {m!r})")
    rho0 = float(check_range(rho0, "rho0", lo=-1.0 / (m - 1), hi=1.0))
    scale = float(check_range(scale, "scale", lo=0.0, lo_open=True, allowed="(0, inf)"))
    return scale * ((1.0 - rho0) * np.eye(m) + rho0 * np.ones((m, m)))


def psd_root(v: torch.Tensor) -> torch.Tensor:
    """R with R R^T = V for a (..., m, m) batch of PSD matrices: Q diag(sqrt(max(w, 0))) (any rank). A matrix
    with a non-finite entry (an overflowed network) gets a root of its finite part; its V stays non-finite."""
    v = torch.nan_to_num(0.5 * (v + v.transpose(-1, -2)), nan=0.0, posinf=0.0, neginf=0.0)  # overflowed nets
    w, q = torch.linalg.eigh(v)
    return q * w.clamp_min(0.0).sqrt()[..., None, :]


def initial_tokens(v0, width: int) -> torch.Tensor:
    """X0 (m, n) with X0 X0^T / n = V0 exactly: sqrt(n) R0 [I_m 0] (the law of the networks is rotation invariant,
    so the orientation of X0 in R^n is immaterial). Needs n >= m."""
    v = as_cov_batch(v0, "v0")[0]
    m = v.shape[-1]
    if width < m:
        raise ValueError(f"width must be >= the number of tokens m = {m} (got {width})")
    x0 = torch.zeros((m, width), dtype=torch.float64)
    x0[:, :m] = math.sqrt(width) * psd_root(v)
    return x0


@dataclass(frozen=True)
class NetworkPath:
    """Result of :func:`simulate_network`: layers (k,) recorded layer indices l (0 = input); times = layers / n
    (the SDE time t = l/n); v (S, k, m, m) = X_l X_l^T / n (non-finite once a network overflowed); width, depth,
    architecture name, seconds of wall time."""

    layers: np.ndarray
    times: np.ndarray
    v: np.ndarray
    width: int
    depth: int
    architecture: str
    seconds: float

    def corr(self, a: int = 0, b: int = 1) -> np.ndarray:
        """rho^{ab}_l = V^{ab}/sqrt(V^{aa} V^{bb}), shape (S, k) (NaN where V is not finite)."""
        v = torch.from_numpy(self.v)
        rho = correlation(torch.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0))[..., a, b].numpy()
        return np.where(np.isfinite(self.v).all(axis=(-1, -2)), rho, np.nan)

    def stopping_times(self, bounds=EIG_BOUNDS) -> np.ndarray:
        """First recorded t = l/n at which an eigenvalue of V_l leaves ``bounds`` (Sec. 4.4); +inf if never."""
        return stopping_times(self.times, self.v, bounds)


def _layer_norm(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:])


def _gram(x: torch.Tensor) -> torch.Tensor:
    return x @ x.transpose(-1, -2) / x.shape[-1]


class _Draws:
    """Gaussian and Bartlett-Wishart draws from one seeded ``numpy.random.Generator`` (PCG64). Large Gaussian
    blocks (m x n per network) are drawn in float32 and cast to float64: the draws' precision, not the arithmetic's
    (float64 throughout), is reduced, which is far below the Monte Carlo error of any statistic reported here."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(int(seed))

    def normal(self, *shape, fast: bool = False) -> torch.Tensor:
        if fast:
            return torch.from_numpy(self.rng.standard_normal(shape, dtype=np.float32)).to(torch.float64)
        return torch.from_numpy(self.rng.standard_normal(shape))

    def bartlett(self, s: int, m: int, dof: int) -> torch.Tensor:
        """(s, m, m) lower-triangular L with L L^T ~ Wishart(I_m, dof) (Bartlett): L_ii = sqrt(chi2(dof - i)),
        L_ij ~ N(0, 1) for i > j. Needs dof >= m."""
        low = np.tril(self.rng.standard_normal((s, m, m)), k=-1)
        low[:, np.arange(m), np.arange(m)] = np.sqrt(self.rng.chisquare(dof - np.arange(m), size=(s, m)))
        return torch.from_numpy(low)


def _attention_args(arch: Architecture, tau: float) -> dict:
    return {"n_heads": 1, "tau": tau, "gamma1": float(arch.identity), "gamma2": float(arch.centre)}


def _attention_full(x, arch, tau, draws: _Draws):
    """A X W_V / sqrt n with full (n x n) weight matrices: the module maths literally (tests, small n)."""
    s, m, n = x.shape
    xin = _layer_norm(x) if arch.pre_ln else x
    w = draws.normal(3, s, n, n) / math.sqrt(n)
    return shaped_attention(xin, w[0], w[1], w[2], **_attention_args(arch, tau))


def _attention_sketch(x, arch, tau, draws: _Draws):
    """The same in law: input R (R R^T = X X^T / n), weights G (m x n) i.i.d. N(0, 1), so x @ w = R G =d X W /
    sqrt n (module docstring)."""
    s, m, n = x.shape
    xin = _layer_norm(x) if arch.pre_ln else x
    g = draws.normal(3, s, m, n, fast=True)
    return shaped_attention(psd_root(_gram(xin)), g[0], g[1], g[2], **_attention_args(arch, tau))


def _mlp_full(x, arch, act, draws: _Draws):
    s, m, n = x.shape
    xin = _layer_norm(x) if arch.pre_ln else x
    w = draws.normal(2, s, n, n) / math.sqrt(n)
    return act(xin @ w[0]) @ w[1]


def _mlp_sketch(x, arch, act, draws: _Draws):
    s, m, n = x.shape
    xin = _layer_norm(x) if arch.pre_ln else x
    h = act(psd_root(_gram(xin)) @ draws.normal(s, m, n, fast=True))
    return psd_root(_gram(h)) @ draws.normal(s, m, n, fast=True)


def _reduced_update(root, branch, lam, gamma, draws: _Draws, n: int):
    """V' = Y Y^T with Y = [lam R + gamma B G1 / sqrt n, gamma B L2 / sqrt n] for a branch output B G_post / sqrt n
    whose fresh Gaussian G_post = [G1 | G2] is split along X's span: G1 (m x m) i.i.d., G2 G2^T ~ Wishart(n - m)."""
    s, m, _ = root.shape
    w = torch.cat([draws.normal(s, m, m), draws.bartlett(s, m, n - m)], dim=-1)
    y = gamma * (branch @ w) / math.sqrt(n)
    y[..., :m] += lam * root
    return y @ y.transpose(-1, -2)


def _attention_reduced(root, arch, tau, lam, gamma, draws: _Draws, n: int):
    """One shaped/softmax attention layer on the state V = R R^T alone (module docstring, "reduced"). The logits
    R G_Q G_K^T R^T =d R L_Q Z^T R^T with L_Q L_Q^T ~ Wishart(n_k, I_m), Z (m x m) i.i.d.; the values
    R [G1 | L2] (width 2m) carry exactly the second moments of X W_V / sqrt n that V' needs. The functional
    shaped_attention is called with x = R, w_q = [L_Q 0], w_k = [Z 0], w_v = [G1 L2] / sqrt n (so that A R w_v is
    the branch output over sqrt n)."""
    s, m, _ = root.shape
    zeros = torch.zeros((s, m, m), dtype=root.dtype)
    w_q = torch.cat([draws.bartlett(s, m, n), zeros], dim=-1)
    w_k = torch.cat([draws.normal(s, m, m), zeros], dim=-1)
    w_v = torch.cat([draws.normal(s, m, m), draws.bartlett(s, m, n - m)], dim=-1) / math.sqrt(n)
    y = gamma * shaped_attention(root, w_q, w_k, w_v, **_attention_args(arch, tau))
    y[..., :m] += lam * root
    return y @ y.transpose(-1, -2)


def _mlp_reduced(root, act, lam, gamma, draws: _Draws, n: int):
    """One shaped-ReLU residual layer on the state V = R R^T: H = sqrt(c) sigma_s(R G_pre) (m x n, the real
    activation on n i.i.d. columns), then the post-weight as in :func:`_reduced_update` with B = root(H H^T / n)."""
    s, m, _ = root.shape
    h = act(root @ draws.normal(s, m, n, fast=True))
    return _reduced_update(root, psd_root(_gram(h)), lam, gamma, draws, n)


def _activation(arch: Architecture, width: int, c_plus: float, c_minus: float) -> ShapedReLU:
    if arch.shaped_relu:
        return ShapedReLU(width, c_plus, c_minus, normalize=True)
    act = ShapedReLU(width, 0.0, 0.0, normalize=True)   # then s_- = 0: the plain ReLU (c = 2)
    act.s_minus.fill_(0.0)
    return act


METHODS = ("reduced", "sketch", "full")


def _chunk_size(m: int, width: int, method: str, budget_mb: float) -> int:
    per_net = 8.0 * 12 * (m * width if method != "full" else 3 * width * width)  # float64, with slack
    return max(1, int(budget_mb * 2**20 // per_net))


def simulate_network(arch, v0, width: int, depth: int, n_samples: int, gamma, tau0=1.0, c_plus: float = 0.0,
                     c_minus: float = -1.0, seed: int = 0, record_layers=None, method: str | None = None,
                     chunk: int | None = None, memory_mb: float = 256.0,
                     progress: Callable[[int], None] | None = None) -> NetworkPath:
    """Simulate ``n_samples`` independent width-n, depth-d residual networks of architecture ``arch`` from X0 with
    X0 X0^T / n = V0, and record V_l = X_l X_l^T / n at ``record_layers`` (default every l = 0..d).

    X_{l+1} = lambda X_l + gamma f_l(X_l), lambda = sqrt(1 - gamma^2) (Noci et al. Eqs. 1, 4, 11; lambda = gamma = 1
    for the unit-residual Pre-LN architectures); f_l per :class:`Architecture`; tau = tau0 sqrt(n n_k) when
    shaped, sqrt(n_k) otherwise (n_k = n); shaped ReLU slopes 1 + c_pm / sqrt n.
    ``method`` (all three have the same law, module docstring): "full" (n x n weight matrices), "sketch"
    (width-n stream, m x n Gaussians), "reduced" (the Markov chain of V itself; default, and not available with
    LayerNorm, whose centring over the width is not rotation invariant: Pre-LN defaults to "sketch").
    ``chunk`` networks at a time (default: from ``memory_mb``); ``progress(k)`` is called with the number of
    networks finished after each chunk. Float64 arithmetic.
    """
    arch = get_architecture(arch)
    gamma = check_gamma(gamma)
    tau0 = check_tau0(tau0)
    for name, val in (("width", width), ("depth", depth), ("n_samples", n_samples)):
        if not isinstance(val, int | np.integer) or isinstance(val, bool) or val < 1:
            raise ValueError(f"{name} must be a positive integer (got {val!r})")
    if not (arch.attention or arch.mlp):
        raise ValueError("an architecture needs an attention or an MLP sublayer")
    method = ("sketch" if arch.pre_ln else "reduced") if method is None else method
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS} (got {method!r})")
    if method == "reduced" and arch.pre_ln:
        raise ValueError("method 'reduced' cannot simulate LayerNorm (Pre-LN): use 'sketch' or 'full'")
    x0 = initial_tokens(v0, width)
    m = x0.shape[0]
    if method == "reduced" and width < 2 * m:
        raise ValueError(f"method 'reduced' needs width >= 2 m = {2 * m} (got {width})")
    rec = np.arange(depth + 1) if record_layers is None else np.asarray(record_layers, dtype=np.int64).reshape(-1)
    if rec.size == 0 or (rec < 0).any() or (rec > depth).any() or (np.diff(rec) <= 0).any():
        raise ValueError(f"record_layers must be strictly increasing layer indices in [0, depth={depth}]")
    pos = {int(k): i for i, k in enumerate(rec)}
    chunk = _chunk_size(m, width, method, memory_mb) if chunk is None else int(chunk)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 (got {chunk})")
    lam, gamma = (1.0, 1.0) if arch.unit_residual else (math.sqrt(1.0 - gamma**2), gamma)
    tau = (tau0 * width) if arch.shaped_tau else math.sqrt(width)   # tau0 sqrt(n n_k) with n_k = n
    act = _activation(arch, width, c_plus, c_minus)
    draws = _Draws(seed)
    attn = {"full": _attention_full, "sketch": _attention_sketch}.get(method)
    mlp = {"full": _mlp_full, "sketch": _mlp_sketch}.get(method)
    out = np.empty((n_samples, rec.size, m, m))
    t0 = time.perf_counter()
    with torch.no_grad():
        for start in range(0, n_samples, chunk):
            s = min(chunk, n_samples - start)
            sl = slice(start, start + s)
            x = x0.expand(s, -1, -1).clone()
            v = _gram(x)
            if 0 in pos:
                out[sl, pos[0]] = v.numpy()
            for layer in range(1, depth + 1):
                if method == "reduced":
                    if arch.attention:
                        v = _attention_reduced(psd_root(v), arch, tau, lam, gamma, draws, width)
                    if arch.mlp:
                        v = _mlp_reduced(psd_root(v), act, lam, gamma, draws, width)
                    v = 0.5 * (v + v.transpose(-1, -2))
                else:
                    if arch.attention:
                        x = lam * x + gamma * attn(x, arch, tau, draws)
                    if arch.mlp:
                        x = lam * x + gamma * mlp(x, arch, act, draws)
                    v = _gram(x)
                if layer in pos:
                    out[sl, pos[layer]] = v.numpy()
            if progress is not None:
                progress(s)
    return NetworkPath(layers=rec, times=rec / width, v=out, width=width, depth=depth, architecture=arch.name,
                       seconds=time.perf_counter() - t0)
