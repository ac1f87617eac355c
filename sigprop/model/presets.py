"""Named configurations that reproduce the paper's whole-model figures (Kedia et al. Figs. 1–4, 7, 8) and the
rank-collapse and Q/K experiments of Secs. 3.3–3.4, the decoder form of Fig. 1 and App. H's DeepScaleLM ViT, at a
width a 2-core CPU measures in minutes.

Each preset is a :class:`TransformerConfig` override set plus how to measure it (seeds, batch). The paper's
figures use 192 layers of a BERT-style encoder with dropout 0.1 on real text; we keep the depth, the objective
(masked LM on real tokens) and the dropout, and use width ``d = 256`` (4 heads of 64, d_ff = 1024), 4 sequences
of 128 tokens, and average over 16 independently initialised models (``seeds``): the theory is an expectation
over the weights, and one finite-width model deviates from it by several percent per layer, mostly through the
hidden-unit offsets W·E[ReLU] that every token shares (the per-seed spread at d = 256:
docs/results/whole-models.md), so averaging over seeds is the honest comparison. What ``sigprop compare`` costs per
preset on 2 CPU cores, most of it measuring and the rest the prediction's sampled attention heads:
docs/results/performance.md. ``vit-preln`` and ``vit-dslm`` classify 8 of
scikit-learn's digits (32 × 32 pixels, 64 patches of 4 × 4: the same 512 tokens a batch).

Three presets have production shapes instead (``llama3-8b``, ``llama3-70b``, ``gpt3-175b``): their theory answers in
seconds (:func:`sigprop.predict` at any size: docs/results/scale.md), while measuring them needs an accelerator;
their depth at a CPU's width is a few ``--set`` away (docs/results/scale.md, "Against measurement at a CPU's
width").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.outputs import StrPath
from .config import TransformerConfig, apply_overrides, config_from_dict

__all__ = ["Preset", "PRESETS", "preset_config", "resolve_config"]

_BASE = dict(arch="encoder", n_layers=192, d_model=256, n_heads=4, dropout=0.1, activation="relu",
             norm="layernorm", seq_len=128, max_len=128, vocab_size=8192)


#: What the Llama 3 presets share (Grattafiori et al. 2024; Hugging Face's LlamaConfig of the published checkpoints).
_LLAMA3 = dict(arch="decoder", n_kv_heads=8, activation="swiglu", norm="rmsnorm", norm_eps=1e-5, position="rope",
               rope_theta=500000.0, dropout=0.0, tie_head=False, vocab_size=128256, seq_len=8192, max_len=8192,
               init="bert", initializer_range=0.02)


@dataclass(frozen=True)
class Preset:
    description: str
    overrides: dict
    seeds: int = 16
    batch_size: int = 4
    figure: str = ""
    extra: dict = field(default_factory=dict)

    def config(self) -> TransformerConfig:
        return TransformerConfig(**{**_BASE, **self.overrides})


PRESETS = {
    "fig1-preln": Preset("Pre-LN, Xavier: forward variance grows linearly, gradient hyperbolically (Figs. 1, 2)",
                         dict(norm_position="pre", init="xavier"), figure="Kedia et al. Figs. 1-2"),
    "fig3-postln": Preset("Post-LN, Xavier: gradient changes exponentially with depth (Fig. 3); with dropout 0.1 "
                          "the token correlation settles below 1 (Fig. 8, App. F)",
                          dict(norm_position="post", init="xavier"), figure="Kedia et al. Fig. 3"),
    "fig4-dslm-pre": Preset("DeepScaleLM, Pre-LN: forward and backward variances conserved (Fig. 4)",
                            dict(norm_position="pre", init="dslm"), figure="Kedia et al. Fig. 4"),
    "fig4-dslm-post": Preset("DeepScaleLM, Post-LN: forward and backward variances conserved (Fig. 4)",
                             dict(norm_position="post", init="dslm"), figure="Kedia et al. Fig. 4"),
    "qk-2x-xavier": Preset("Pre-LN with Q/K at 2x Xavier: the gradient explodes (Sec. 3.3)",
                           dict(norm_position="pre", init="xavier", qk_gain=2.0), figure="Kedia et al. Sec. 3.3"),
    "rank-collapse-noci": Preset("No dropout, V at 1/fan_out (Noci et al.): rank collapse, correlation -> 1 (App. F)",
                                 dict(norm_position="post", init="xavier", dropout=0.0, v_init="noci"),
                                 figure="Kedia et al. App. F"),
    "decoder-preln": Preset("Pre-LN decoder (causal attention, next-token loss), Xavier: the sampled attention "
                            "rule, moments averaged over positions",
                            dict(arch="decoder", norm_position="pre", init="xavier"), figure="Kedia et al. Figs. 1-2"),
    "llama-preln": Preset("Llama-style decoder, 48 layers: RMSNorm before each branch, SwiGLU (d_ff = 768), rotary "
                          "positions and no position table, 4 query heads of 64 sharing 2 key/value heads, no "
                          "dropout, an untied head, every matrix N(0, 0.02²) (Hugging Face's initializer_range)",
                          dict(arch="decoder", n_layers=48, n_heads=4, n_kv_heads=2, d_ff=768, activation="swiglu",
                               norm="rmsnorm", norm_eps=1e-6, position="rope", dropout=0.0, tie_head=False,
                               init="bert", initializer_range=0.02),
                          figure="Touvron et al. 2023 (Llama)"),
    "llama3-8b": Preset("Llama-3-8B's published shape: 32 layers of d = 4096, 32 query heads of 128 sharing 8 "
                        "key/value heads, SwiGLU (d_ff = 14336), RMSNorm (eps 1e-5), rotary positions (base 500 000), "
                        "vocabulary 128 256, 8192 tokens, no dropout, an untied head, every matrix N(0, 0.02²); theory "
                        "only at this size (measuring it needs an accelerator; --set d_model=256 --set n_heads=4 "
                        "--set n_kv_heads=1 --set d_ff=896 gives a CPU-sized model of its depth)",
                        dict(_LLAMA3, n_layers=32, d_model=4096, n_heads=32, d_ff=14336), seeds=1, batch_size=1,
                        figure="Grattafiori et al. 2024 (Llama 3)"),
    "llama3-70b": Preset("Llama-3-70B's published shape: 80 layers of d = 8192, 64 query heads of 128 sharing 8 "
                         "key/value heads, SwiGLU (d_ff = 28672), otherwise as llama3-8b",
                         dict(_LLAMA3, n_layers=80, d_model=8192, n_heads=64, d_ff=28672), seeds=1, batch_size=1,
                         figure="Grattafiori et al. 2024 (Llama 3)"),
    "gpt3-175b": Preset("A GPT-3-175B-like decoder: 96 Pre-LN layers of d = 12288, 96 heads of 128, GELU (d_ff = 4d), "
                        "LayerNorm, learned positions, vocabulary 50 257, 2048 tokens, dropout 0.1, a tied head, every "
                        "matrix N(0, 0.02²)",
                        dict(arch="decoder", n_layers=96, d_model=12288, n_heads=96, activation="gelu",
                             norm="layernorm", norm_position="pre", position="learned", dropout=0.1, tie_head=True,
                             vocab_size=50257, seq_len=2048, max_len=2048, init="bert", initializer_range=0.02),
                        seeds=1, batch_size=1, figure="Brown et al. 2020 (GPT-3)"),
    "vit-preln": Preset("Pre-LN ViT, Xavier: the patch model of vit-dslm without DeepScaleLM: forward variance "
                        "grows linearly, the gradient towards the input (App. H's baseline)",
                        dict(input="patches", image_size=32, patch_size=4, channels=1, n_classes=10, seq_len=64,
                             norm_position="pre", init="xavier"), batch_size=8, figure="Kedia et al. App. H"),
    "vit-dslm": Preset("DeepScaleLM ViT, Pre-LN: a patch model classifying images (digits, 8 × 64 patches), its "
                       "input correlation from the images; forward and backward moments controlled (App. H, Fig. 11)",
                       dict(input="patches", image_size=32, patch_size=4, channels=1, n_classes=10, seq_len=64,
                            norm_position="pre", init="dslm"), batch_size=8, figure="Kedia et al. App. H, Fig. 11"),
    "encdec-preln": Preset("Pre-LN encoder-decoder, 96 + 96 layers, Xavier: cross-attention (sampled rule); the "
                           "encoder's gradient arrives through the 96 cross-attentions",
                           dict(arch="encoder_decoder", n_layers=96, n_decoder_layers=96, norm_position="pre",
                                init="xavier"), figure="Kedia et al. Figs. 1-2"),
}


def preset_config(name: str) -> TransformerConfig:
    """The configuration of preset ``name``."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[name].config()


def resolve_config(preset: str | None = None, config_file: StrPath | None = None,
                   overrides: Iterable[str] = ()) -> tuple[TransformerConfig, Preset | None]:
    """The configuration of a preset, then a JSON file's fields over it, then ``key=value`` overrides (the command
    line's ``--preset``, ``--config``, ``--set``); returns (config, the preset or None). The file holds
    :class:`TransformerConfig` fields, or is a profile or comparison JSON whose ``config`` is reused. ``ValueError``
    naming the preset, the file or the field otherwise."""
    from pathlib import Path

    from ..core.jsonio import read_config_json

    chosen, fields = None, {}
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; presets: {', '.join(PRESETS)}")
        chosen = PRESETS[preset]
        fields = chosen.config().to_dict()
    if config_file is not None:
        path = Path(config_file)
        data = read_config_json(path)
        if isinstance(data, dict) and isinstance(data.get("config"), dict):
            if not data["config"]:  # a measurement of an unmapped Hugging Face family: no config, not the default
                theory = (data.get("meta") or {}).get("theory") if isinstance(data.get("meta"), dict) else None
                raise ValueError(f"{path} holds a profile without a model configuration"
                                 f"{' (' + str(theory) + ')' if theory else ''}")
            data = data["config"]  # a profile or comparison JSON: reuse its config
        if not isinstance(data, dict):
            raise ValueError(f"{path} must hold a JSON object of TransformerConfig fields")
        fields = {**fields, **data}
    config = config_from_dict(fields) if fields else TransformerConfig()
    return apply_overrides(config, list(overrides or ())), chosen
