"""What an APJN experiment is (:class:`ApjnSetup`): the model, its inputs and the measurement, validated in one
place. Light to import: the command line reads its defaults for ``--help``."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..core.validate import check_choice, check_integer, check_number

__all__ = ["ApjnSetup", "NORMS", "INPUTS", "KINDS", "THEORY_NORM"]

NORMS = ("layernorm", "dyt", "derf")
INPUTS = ("equiangular", "digits")
KINDS = ("backward", "forward")
#: the elementwise φ of each norm in the recurrences (sigprop.apjn.elementwise)
THEORY_NORM = {"layernorm": "layernorm", "dyt": "tanh", "derf": "erf"}
#: the patch side of the digits images; tokens = (image side / patch side)²
_PATCH = 4


@dataclass(frozen=True)
class ApjnSetup:
    """One APJN experiment (Alekseev Sec. 3.1, App. A). Defaults: the paper's ViT initialisation (σ_21 = 0.61,
    σ_OV = 0.31, App. A) at a width this CPU runs in about a minute per curve, equiangular inputs (q⁰, p⁰) = (1, 0.2)
    as in Fig. 1(a), 10 Hutchinson probes per model, 4 weight seeds.

    ``norm``: "layernorm" (pre-LN) or "dyt" / "derf" (φ_α replacing every norm, the final one included) with α =
    ``alpha``; ``blocks`` B; ``tokens`` n, a square number (the ViT's patch grid: digits' 8×8 images are upsampled
    to 4·√n pixels a side and cut into 4×4 patches); ``inputs``: "equiangular" (a fresh exact configuration per
    weight seed) or "digits" (``samples`` images, each its own curve with (q⁰, p⁰) from Eq. 21); ``kind``: "backward"
    𝒥^{B,b} or "forward" 𝒥^{b,0}; ``stride``: measure every ``stride``-th block (the last one always).
    """

    norm: str = "layernorm"
    alpha: float = 1.0
    blocks: int = 64
    sigma_21: float = 0.61
    sigma_ov: float = 0.31
    d_model: int = 256
    n_heads: int = 4
    tokens: int = 64
    activation: str = "relu"
    inputs: str = "equiangular"
    q0: float = 1.0
    p0: float = 0.2
    samples: int = 4
    probes: int = 10
    seeds: int = 4
    seed0: int = 0
    stride: int = 1
    kind: str = "backward"

    def __post_init__(self):
        def choice(name, allowed):
            check_choice(self, name, allowed)

        def integer(name, lo):
            check_integer(self, name, lo)

        def number(name, lo, lo_open=False, hi=100.0):
            check_number(self, name, lo, hi, lo_open=lo_open)

        choice("norm", NORMS)
        choice("inputs", INPUTS)
        choice("kind", KINDS)
        choice("activation", ("relu", "gelu"))
        for name, lo in (("blocks", 2), ("d_model", 1), ("n_heads", 1), ("tokens", 2), ("samples", 1),
                         ("probes", 2), ("seeds", 1), ("seed0", 0), ("stride", 1)):
            integer(name, lo)
        number("alpha", 0.0, lo_open=True)
        number("sigma_21", 0.0)
        number("sigma_ov", 0.0)
        number("q0", 0.0, lo_open=True)
        number("p0", 0.0)
        if self.p0 > self.q0:
            raise ValueError(f"p0 must be <= q0 (a covariance cannot exceed the variance; got q0={self.q0}, "
                             f"p0={self.p0})")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.inputs == "equiangular" and self.tokens > self.d_model and self.p0 < self.q0:
            raise ValueError(f"an equiangular configuration with p0 < q0 needs tokens <= d_model "
                             f"(got tokens={self.tokens}, d_model={self.d_model})")
        if math.isqrt(self.tokens) ** 2 != self.tokens:
            raise ValueError(f"the ViT's tokens are a square grid of image patches: tokens must be a square number "
                             f"(got {self.tokens})")
        if self.inputs == "digits" and self.kind == "forward":
            raise ValueError("inputs='digits' measures the backward APJN (kind='backward')")

    @property
    def label(self) -> str:
        return "pre-LN" if self.norm == "layernorm" else f"{'Derf' if self.norm == 'derf' else 'DyT'} α={self.alpha:g}"

    def model_config(self):
        """The ViT-form :class:`~sigprop.model.config.TransformerConfig` of this setup
        (:func:`~sigprop.model.vit.vit_config`)."""
        from ..model.vit import vit_config

        side = _PATCH * math.isqrt(self.tokens)
        alpha = None if self.norm == "layernorm" else self.alpha
        return vit_config(self.blocks, self.d_model, self.n_heads, norm=self.norm, alpha=alpha,
                          sigma_ov=self.sigma_ov, sigma_21=self.sigma_21, activation=self.activation,
                          image_size=side, patch_size=_PATCH, channels=1, seq_len=self.tokens)

    def measured_blocks(self) -> list[int]:
        """The blocks measured: every ``stride``-th of 0…B−1 plus B−1 (𝒥^{B,B} = 1 needs no measurement)."""
        top = self.blocks if self.kind == "forward" else self.blocks - 1
        low = 1 if self.kind == "forward" else 0
        return sorted(set(range(low, top + 1, self.stride)) | {top})

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
