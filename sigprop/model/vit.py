"""The ViT form of Alekseev 2026 (Sec. 2.1, App. A) as a :class:`TransformerConfig`: a bidirectional encoder on
image patches, pre-norm with a final norm, no dropout, d_ff = 4d, ReLU MLP, initialised by ``init="alekseev"``."""

from __future__ import annotations

from typing import Any, NamedTuple

from .config import TransformerConfig

__all__ = ["vit_config", "timm_sigmas", "TimmSigmas"]


class TimmSigmas(NamedTuple):
    """σ_OV and σ_21 by name (the APJN functions take them by keyword only: the two are easily swapped)."""

    sigma_ov: float
    sigma_21: float


def timm_sigmas(d_model: int, std: float = 0.02) -> TimmSigmas:
    """(σ_OV, σ_21), named, of timm's ViT initialisation (every matrix N(0, std²)) at width d (Alekseev App. A):
    σ_O = σ_V = std·√d and σ_1 = std·√d, σ_2 = std·√(4d), so σ_OV = std²·d and σ_21 = 2·std²·d (0.307 and 0.614
    at d = 768, the paper's "σ_OV ≈ 0.31, σ_21 ≈ 0.61"). Pass them on by name:
    ``apjn_profile(**timm_sigmas(768)._asdict(), blocks=12)``."""
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 1:
        raise ValueError(f"d_model must be an integer >= 1 (got {d_model!r})")
    if not std > 0:
        raise ValueError(f"std must be > 0 (got {std!r})")
    return TimmSigmas(sigma_ov=std**2 * d_model, sigma_21=2.0 * std**2 * d_model)


def vit_config(n_blocks: int, d_model: int, n_heads: int, norm: str = "layernorm", alpha: float | None = None,
               alpha_attn: float | None = None, alpha_ffn: float | None = None,
               alpha_final: float | None = None, sigma_ov: float | None = None, sigma_21: float | None = None,
               activation: str = "relu", image_size: int = 32, patch_size: int = 4, channels: int = 1,
               n_classes: int = 10, **overrides: Any) -> TransformerConfig:
    """The paper's ViT form (Alekseev Sec. 2.1, Eq. 1; App. A) with ``n_blocks`` blocks (one block = one sigprop
    :class:`~sigprop.model.layer.TransformerLayer`: attention residual + MLP residual, L = 2B layers).

    Encoder (bidirectional attention), patch input of ``image_size``² images with ``channels`` channels cut into
    ``patch_size``² patches (n = (image_size/patch_size)² tokens), dropout 0 everywhere, pre-norm with a final norm,
    d_ff = 4d, ``activation`` ("relu" as in Sec. 3, or "gelu" as timm's ViT). ``norm`` is "layernorm" (pre-LN),
    "rmsnorm", or "dyt" / "derf" (φ_α replacing every norm, the final one included, App. A), with initial α
    ``alpha`` (None: the config default) and optional position-specific ``alpha_attn`` / ``alpha_ffn`` /
    ``alpha_final``. Weights follow ``init="alekseev"`` with ``sigma_ov`` / ``sigma_21`` (None: the config defaults
    0.31 / 0.61, the paper's ViT values). ``overrides`` are further :class:`TransformerConfig` fields
    (``pool="cls"`` adds the [CLS] token to the sequence).
    """
    kw: dict[str, Any] = dict(arch="encoder", input="patches", n_layers=n_blocks, d_model=d_model, n_heads=n_heads,
              d_ff=None if isinstance(d_model, bool) or not isinstance(d_model, int) else 4 * d_model,
              activation=activation, dropout=0.0, attn_dropout=0.0, norm=norm, norm_position="pre",
              final_norm=True, init="alekseev", image_size=image_size, patch_size=patch_size, channels=channels,
              n_classes=n_classes)
    if norm in ("layernorm", "rmsnorm") and any(a is not None for a in (alpha, alpha_attn, alpha_ffn, alpha_final)):
        raise ValueError(f"alpha / alpha_attn / alpha_ffn / alpha_final apply to norm='dyt' or 'derf' only "
                         f"(got norm={norm!r})")
    for key, value in (("norm_alpha", alpha), ("norm_alpha_attn", alpha_attn), ("norm_alpha_ffn", alpha_ffn),
                       ("norm_alpha_final", alpha_final), ("sigma_ov", sigma_ov), ("sigma_21", sigma_21)):
        if value is not None:
            kw[key] = value
    if isinstance(image_size, int) and isinstance(patch_size, int) and patch_size > 0:
        # the patches, and a [CLS] token before them where the classifier reads it
        kw["seq_len"] = (image_size // patch_size) ** 2 + (overrides.get("pool") == "cls")
    kw.update(overrides)
    return TransformerConfig(**kw)
