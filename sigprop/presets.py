"""Named configurations that reproduce the paper's whole-model figures (Kedia et al. Figs. 1–4, 7, 8) and the
rank-collapse and Q/K experiments of Secs. 3.3–3.4, at a width a 2-core CPU runs in about two minutes.

Each preset is a :class:`TransformerConfig` override set plus how to measure it (seeds, batch). The paper's
figures use 192 layers of a BERT-style encoder with dropout 0.1 on real text; we keep the depth, the objective
(masked LM on real tokens) and the dropout, and shrink the width to ``d = 128`` (4 heads of 32, d_ff = 512) and the
sequence to 128 tokens; the statistics are averaged over independently initialised models (``seeds``), which is
the honest way to compare a finite-width measurement with the theory's expectation over the weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model.config import TransformerConfig

__all__ = ["Preset", "PRESETS", "preset_config"]

_BASE = dict(arch="encoder", n_layers=192, d_model=128, n_heads=4, dropout=0.1, activation="relu",
             norm="layernorm", seq_len=128, max_len=128, vocab_size=8192)


@dataclass(frozen=True)
class Preset:
    description: str
    overrides: dict
    seeds: int = 6
    batch_size: int = 8
    figure: str = ""
    extra: dict = field(default_factory=dict)

    def config(self) -> TransformerConfig:
        return TransformerConfig(**{**_BASE, **self.overrides})


PRESETS = {
    "fig1-preln": Preset("Pre-LN, Xavier: forward variance grows linearly, gradient hyperbolically (Figs. 1, 2)",
                         dict(norm_position="pre", init="xavier"), figure="Kedia et al. Figs. 1-2"),
    "fig3-postln": Preset("Post-LN, Xavier: gradient changes exponentially with depth (Fig. 3)",
                          dict(norm_position="post", init="xavier"), figure="Kedia et al. Fig. 3"),
    "fig4-dslm-pre": Preset("DeepScaleLM, Pre-LN: forward and backward variances conserved (Fig. 4)",
                            dict(norm_position="pre", init="dslm"), figure="Kedia et al. Fig. 4"),
    "fig4-dslm-post": Preset("DeepScaleLM, Post-LN: forward and backward variances conserved (Fig. 4)",
                             dict(norm_position="post", init="dslm"), figure="Kedia et al. Fig. 4"),
    "qk-2x-xavier": Preset("Pre-LN with Q/K at 2x Xavier: the gradient explodes (Sec. 3.3)",
                           dict(norm_position="pre", init="xavier", qk_gain=2.0), figure="Kedia et al. Sec. 3.3"),
    "rank-dropout": Preset("Post-LN, Xavier, dropout 0.1: token correlation settles below 1 (Fig. 8, App. F)",
                           dict(norm_position="post", init="xavier"), figure="Kedia et al. Figs. 7-8"),
    "rank-collapse-noci": Preset("No dropout, V at 1/fan_out (Noci et al.): rank collapse, correlation -> 1 (App. F)",
                                 dict(norm_position="post", init="xavier", dropout=0.0, v_init="noci"),
                                 figure="Kedia et al. App. F"),
}


def preset_config(name: str) -> TransformerConfig:
    """The configuration of preset ``name``."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[name].config()
