"""Hugging Face configurations as sigprop configurations: :func:`from_hf` maps a GPT-2, BERT, RoBERTa, OPT,
Llama-family (Llama, Qwen2, Mistral), Qwen3, Phi-1/2, Phi-3, Gemma, GPT-NeoX or ViT configuration (or a model, or a
local folder holding ``config.json``) to the :class:`~sigprop.model.config.TransformerConfig` that builds the same
network at initialisation, and says what it cannot map (:func:`map_hf_config` returns the list; :func:`from_hf`
warns with it).

What "the same" means here: the same weight shapes, the same per-role initial standard deviations and the same
placement of norms, residuals and positions, so that sigprop's theory of the mapped config describes the Hugging Face
model at initialisation. Hugging Face's ``_init_weights`` draws every matrix and table from N(0, initializer_range²),
biases zero, norms at 1 (sigprop's ``init="bert"`` with ``initializer_range``), with one exception: GPT-2 draws each
block's output projections (attention and MLP ``c_proj``) with std initializer_range/√(2·n_layer). A branch ending in
a matrix scaled by c is the branch times c, so that is β = 1/√(2·n_layer) on every residual (λ = 1): the same
function at initialisation; in training the scale then sits outside the weights (a fixed multiplier), not in them.
Zero biases change nothing at initialisation and are not modelled (noted where the model has them).

Needs the optional extra ``hf`` (``pip install -e ".[hf]"``); nothing is downloaded: a folder is read with
``local_files_only``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..model.config import TransformerConfig

__all__ = ["HFMapping", "map_hf_config", "from_hf", "not_mapped_reason", "FAMILIES", "NOT_MAPPED"]

#: Hugging Face model_type → the family whose configuration mapping sigprop has (its theory; any model is measured).
FAMILIES = {"gpt2": "gpt2", "bert": "bert", "roberta": "roberta", "opt": "opt", "llama": "llama", "qwen2": "llama",
            "mistral": "llama", "qwen3": "qwen3", "phi3": "phi3", "gemma": "gemma", "gpt_neox": "gpt_neox",
            "phi": "phi", "vit": "vit"}

#: Families people train whose configuration is not mapped yet → the component sigprop's theory cannot state for it.
#: Any other unmapped family gets the general reason. They are measured all the same (``sigprop measure --hf``).
NOT_MAPPED = {
    "gemma2": "norms after each branch and logit soft-capping, which sigprop has no rules for",
    "gemma3": "norms after each branch and RMSNorm on queries and keys (QK-norm), which sigprop has no rules for",
    "t5": "relative position buckets and attention scores without the 1/√d_k scaling (folded into its "
          "initialisation), in an encoder–decoder",
    "bloom": "ALiBi position biases, which sigprop has no rule for",
    "falcon": "its fused query–key–value layout (no weight layout is written for it), optional ALiBi position "
              "biases and the two-norm block of new_decoder_architecture",
    "mixtral": "a mixture of experts in every block",
}

#: Sequence length the mapped config's predictions assume, unless the model's context is shorter.
DEFAULT_SEQ_LEN = 128


@dataclass(frozen=True)
class HFMapping:
    """A mapped configuration and what the mapping leaves out or approximates (one sentence each)."""

    config: TransformerConfig
    notes: tuple[str, ...]
    model_type: str


def _hf_config(obj):
    """The ``PretrainedConfig`` of a config, a model or a local folder (``config.json``)."""
    if isinstance(obj, str | Path):
        path = Path(obj)
        if not (path / "config.json").is_file():
            raise ValueError(f"{path}: not a folder with a config.json (sigprop reads local Hugging Face models only)")
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(path), local_files_only=True)
    cfg = getattr(obj, "config", obj)
    if not hasattr(cfg, "model_type") or not hasattr(cfg, "to_dict"):
        raise TypeError(f"expected a Hugging Face config, model or local folder (got {type(obj).__name__})")
    return cfg


def _activation(name: str, notes: list, gated: bool) -> str:
    name = str(name)
    if name in ("silu", "swish"):
        return "swiglu" if gated else _unmapped(name)
    if name in ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        if name != "gelu":
            notes.append(f"activation {name!r} (GELU's tanh approximation) is modelled as the exact GELU: the two "
                         "differ by at most 0.0005 at any input")
        return "geglu" if gated else "gelu"
    if name == "relu" and not gated:
        return "relu"
    return _unmapped(name)


def _unmapped(name: str) -> str:
    raise ValueError(f"activation {name!r} has no sigprop rule (supported: relu, gelu and its tanh forms; silu or "
                     "gelu in a gated MLP)")


def _seq_len(max_len: int) -> int:
    return min(DEFAULT_SEQ_LEN, int(max_len))


def _gpt2(c, notes: list) -> dict:
    d = int(c.n_embd)
    if not getattr(c, "scale_attn_weights", True):
        raise ValueError("GPT-2 with scale_attn_weights=False (attention scores without 1/√d_head) is not mapped: "
                         "sigprop's attention always scales its scores by 1/√d_head")
    if getattr(c, "scale_attn_by_inverse_layer_idx", False) or getattr(c, "reorder_and_upcast_attn", False):
        notes.append("scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not modelled")
    notes.append("biases (zero at initialisation) are not modelled")
    notes.append("output projections at initializer_range/√(2·n_layer) are mapped to β = 1/√(2·n_layer) on every "
                 "residual (the same function at initialisation)")
    return dict(arch="decoder", n_layers=int(c.n_layer), d_model=d, n_heads=int(c.n_head),
                d_ff=int(c.n_inner) if c.n_inner else 4 * d,
                activation=_activation(c.activation_function, notes, False),
                dropout=float(c.resid_pdrop), attn_dropout=float(c.attn_pdrop), embed_dropout=float(c.embd_pdrop),
                norm="layernorm", norm_eps=float(c.layer_norm_epsilon), norm_position="pre", final_norm=True,
                position="learned", max_len=int(c.n_positions), seq_len=_seq_len(c.n_positions),
                vocab_size=int(c.vocab_size),
                tie_head=bool(getattr(c, "tie_word_embeddings", True)), init="bert",
                initializer_range=float(c.initializer_range), beta=1.0 / math.sqrt(2.0 * int(c.n_layer)))


def _bert(c, notes: list) -> dict:
    notes.append("BERT's embedding LayerNorm (after the token, position and segment sum) is not modelled: sigprop's "
                 "first layer reads the sum as it is")
    notes.append("biases (zero at initialisation) are not modelled")
    if getattr(c, "is_decoder", False):
        raise ValueError("a BERT configured as a decoder (is_decoder=True) is not supported")
    return dict(arch="encoder", n_layers=int(c.num_hidden_layers), d_model=int(c.hidden_size),
                n_heads=int(c.num_attention_heads), d_ff=int(c.intermediate_size),
                activation=_activation(c.hidden_act, notes, False), dropout=float(c.hidden_dropout_prob),
                attn_dropout=float(c.attention_probs_dropout_prob), norm="layernorm", norm_eps=float(c.layer_norm_eps),
                norm_position="post", final_norm=False, position="learned", max_len=int(c.max_position_embeddings),
                seq_len=_seq_len(c.max_position_embeddings), n_segments=int(c.type_vocab_size),
                vocab_size=int(c.vocab_size), tie_head=bool(getattr(c, "tie_word_embeddings", True)), init="bert",
                initializer_range=float(c.initializer_range), head_transform=True)


def _rope_theta(c, notes: list) -> float:
    params = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    kind = params.get("rope_type", params.get("type", "default")) if isinstance(params, dict) else "default"
    if kind != "default":
        notes.append(f"rope scaling {kind!r} is not modelled: plain rotary embedding with the same base")
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta if theta is not None else getattr(c, "rope_theta", 10000.0))


def _llama(c, notes: list) -> dict:
    d, h = int(c.hidden_size), int(c.num_attention_heads)
    head_dim = getattr(c, "head_dim", None)
    head_dim = None if head_dim in (None, d // h) and d % h == 0 else int(head_dim)
    if getattr(c, "attention_bias", False) or getattr(c, "mlp_bias", False) or c.model_type == "qwen2":
        notes.append("biases (zero at initialisation) are not modelled")
    seq_len = _seq_len(c.max_position_embeddings)
    return dict(arch="decoder", n_layers=int(c.num_hidden_layers), d_model=d, n_heads=h,
                n_kv_heads=int(getattr(c, "num_key_value_heads", None) or h), head_dim=head_dim,
                d_ff=int(c.intermediate_size), activation=_activation(c.hidden_act, notes, True), dropout=0.0,
                attn_dropout=float(getattr(c, "attention_dropout", 0.0)), norm="rmsnorm",
                norm_eps=float(c.rms_norm_eps), norm_position="pre", final_norm=True, position="rope",
                rope_theta=_rope_theta(c, notes), max_len=int(c.max_position_embeddings), seq_len=seq_len,
                vocab_size=int(c.vocab_size), tie_head=bool(getattr(c, "tie_word_embeddings", False)), init="bert",
                initializer_range=float(c.initializer_range))


def _roberta(c, notes: list) -> dict:
    """RoBERTa: BERT's network (Post-LN encoder, learned positions, masked-LM head) whose position ids start at
    padding id + 1: the rows of the table it reads are as i.i.d. as BERT's first ones (the same statistics at
    initialisation), and its context is ``max_position_embeddings`` − padding id − 1 tokens."""
    fields = _bert(c, notes)
    if str(getattr(c, "hidden_act", "gelu")) not in ("gelu", "gelu_python"):  # RobertaLMHead calls gelu itself
        raise ValueError(f"RoBERTa with hidden_act={c.hidden_act!r} is not mapped: its masked-LM head transform "
                         "applies GELU whatever hidden_act says, and sigprop's uses the blocks' activation")
    offset = int(getattr(c, "pad_token_id", 1) or 0) + 1
    notes.append(f"position ids start at {offset} (RoBERTa's padding offset): the same i.i.d. rows at initialisation")
    return {**fields, "seq_len": _seq_len(int(c.max_position_embeddings) - offset)}


def _opt(c, notes: list) -> dict:
    """OPT: a decoder with learned positions (its table holds 2 rows more than the context: ids start at 2), ReLU,
    LayerNorm before (``do_layer_norm_before``, every size but 350m) or after each branch, biases, a tied head; every
    matrix and table drawn from N(0, init_std²)."""
    d = int(c.hidden_size)
    if int(getattr(c, "word_embed_proj_dim", d)) != d:
        raise ValueError(f"OPT with word_embed_proj_dim = {c.word_embed_proj_dim} != hidden_size = {d} (a projection "
                         "of the embedding in and out) is not mapped")
    if not getattr(c, "layer_norm_elementwise_affine", True):
        notes.append("norms without affine parameters: the same function at initialisation")
    pre = bool(getattr(c, "do_layer_norm_before", True))
    notes.append("biases (zero at initialisation) are not modelled")
    notes.append("position ids start at 2 (OPT's offset): the same i.i.d. rows at initialisation")
    if float(getattr(c, "layerdrop", 0.0) or 0.0) > 0:
        notes.append("layerdrop is not modelled (it acts in training only)")
    return dict(arch="decoder", n_layers=int(c.num_hidden_layers), d_model=d, n_heads=int(c.num_attention_heads),
                d_ff=int(c.ffn_dim), activation=_activation(c.activation_function, notes, False),
                dropout=float(c.dropout), attn_dropout=float(c.attention_dropout), embed_dropout=0.0,  # none in OPT
                norm="layernorm", norm_eps=1e-5,
                norm_position="pre" if pre else "post",
                final_norm=pre and not getattr(c, "_remove_final_layer_norm", False), position="learned",
                max_len=int(c.max_position_embeddings) + 2, seq_len=_seq_len(c.max_position_embeddings),
                vocab_size=int(c.vocab_size), tie_head=bool(getattr(c, "tie_word_embeddings", True)), init="bert",
                initializer_range=float(c.init_std))


def _qwen3(c, notes: list) -> dict:
    """Qwen3: Llama's network with QK-norm, an RMSNorm (ε = ``rms_norm_eps``, gain 1 at initialisation) on every
    query and key head before the rotation (:mod:`sigprop.components.query_key`), and its own head width
    ``head_dim``."""
    layer_types = getattr(c, "layer_types", None) or ()
    if "sliding_attention" in layer_types:
        notes.append(f"sliding-window attention on {layer_types.count('sliding_attention')} layers is not modelled")
    fields = _llama(c, notes)
    return {**fields, "qk_norm": True}


def _rotary_fraction(c) -> float:
    """The part of each head rotary embedding rotates (``partial_rotary_factor``, GPT-NeoX's ``rotary_pct``)."""
    params = getattr(c, "rope_parameters", None) or getattr(c, "rope_scaling", None) or {}
    partial = params.get("partial_rotary_factor") if isinstance(params, dict) else None
    partial = getattr(c, "partial_rotary_factor", getattr(c, "rotary_pct", None)) if partial is None else partial
    return 1.0 if partial is None else float(partial)


def _gpt_neox(c, notes: list) -> dict:
    """GPT-NeoX (Pythia): a Pre-LN decoder whose attention and MLP read the same input through their own LayerNorm
    and are added to it together (``use_parallel_residual``; a sequential Pre-LN block without it), rotary
    positions on the first ``partial_rotary_factor`` of each head (0.25 by default), fused QKV with biases, an
    untied head; every matrix and table from N(0, initializer_range²)."""
    d, h = int(c.hidden_size), int(c.num_attention_heads)
    notes.append("biases (zero at initialisation) are not modelled")
    if float(c.hidden_dropout) != float(c.attention_dropout):
        notes.append(f"hidden dropout {c.hidden_dropout} is on every branch and the embedding; attention dropout "
                     f"{c.attention_dropout} on the probabilities")
    return dict(arch="decoder", n_layers=int(c.num_hidden_layers), d_model=d, n_heads=h,
                d_ff=int(c.intermediate_size), activation=_activation(c.hidden_act, notes, False),
                dropout=float(c.hidden_dropout), attn_dropout=float(c.attention_dropout), norm="layernorm",
                norm_eps=float(c.layer_norm_eps), norm_position="pre", final_norm=True, position="rope",
                rope_theta=_rope_theta(c, notes), rotary_fraction=_rotary_fraction(c),
                parallel_block=bool(getattr(c, "use_parallel_residual", True)),
                max_len=int(c.max_position_embeddings), seq_len=_seq_len(c.max_position_embeddings),
                vocab_size=int(c.vocab_size), tie_head=bool(getattr(c, "tie_word_embeddings", False)), init="bert",
                initializer_range=float(c.initializer_range))


def _phi(c, notes: list) -> dict:
    """Phi-1/2: a Pre-LN decoder whose attention and MLP read one shared LayerNorm of the input and are added to it
    together (the parallel block; at initialisation a norm per branch is the same function), rotary positions on the
    first ``partial_rotary_factor`` of each head (0.5), GELU's tanh form, biases, an untied head with a bias."""
    if getattr(c, "qk_layernorm", False):
        raise ValueError("Phi with qk_layernorm=True (LayerNorm on queries and keys) is not mapped: sigprop's QK-norm "
                         "is Qwen3's RMSNorm")
    d, h = int(c.hidden_size), int(c.num_attention_heads)
    notes.append("biases (zero at initialisation) are not modelled")
    return dict(arch="decoder", n_layers=int(c.num_hidden_layers), d_model=d, n_heads=h,
                n_kv_heads=int(getattr(c, "num_key_value_heads", None) or h), d_ff=int(c.intermediate_size),
                activation=_activation(c.hidden_act, notes, False), dropout=float(c.resid_pdrop),
                embed_dropout=float(c.embd_pdrop),
                attn_dropout=float(c.attention_dropout), norm="layernorm", norm_eps=float(c.layer_norm_eps),
                norm_position="pre", final_norm=True, position="rope", rope_theta=_rope_theta(c, notes),
                rotary_fraction=_rotary_fraction(c), parallel_block=True, max_len=int(c.max_position_embeddings),
                seq_len=_seq_len(c.max_position_embeddings), vocab_size=int(c.vocab_size),
                tie_head=bool(getattr(c, "tie_word_embeddings", False)), init="bert",
                initializer_range=float(c.initializer_range))


def _vit(c, notes: list) -> dict:
    """ViT (``ViTForImageClassification``): a Pre-LN encoder on the image's patches (a convolution of stride P: one
    linear map of each flattened (C, P, P) patch), a learned [CLS] token prepended and a learned position row added to
    every token, a final LayerNorm and a classifier of the [CLS] token; every matrix, the [CLS] vector and the position
    table from N(0, initializer_range²) (the latter two truncated at ±2, which at std 0.02 cuts nothing)."""
    size, patch = c.image_size, c.patch_size
    for name, v in (("image_size", size), ("patch_size", patch)):
        if not isinstance(v, int):
            raise ValueError(f"ViT with a non-square {name} {v!r} is not mapped (sigprop's images are square)")
    if getattr(c, "qkv_bias", True):
        notes.append("biases (zero at initialisation) are not modelled")
    n_tokens = (int(size) // int(patch)) ** 2 + 1
    return dict(arch="encoder", input="patches", pool="cls", image_size=int(size), patch_size=int(patch),
                channels=int(c.num_channels), n_classes=int(c.num_labels), n_layers=int(c.num_hidden_layers),
                d_model=int(c.hidden_size), n_heads=int(c.num_attention_heads), d_ff=int(c.intermediate_size),
                activation=_activation(c.hidden_act, notes, False), dropout=float(c.hidden_dropout_prob),
                attn_dropout=float(c.attention_probs_dropout_prob), norm="layernorm",
                norm_eps=float(c.layer_norm_eps), norm_position="pre", final_norm=True, position="learned",
                seq_len=n_tokens, max_len=max(n_tokens, 2), tie_head=False, init="bert",
                initializer_range=float(c.initializer_range))


def _phi3(c, notes: list) -> dict:
    """Phi-3: Llama's network with fused projections (``qkv_proj``, ``gate_up_proj``: the same matrices side by
    side) and dropout on each branch's output (``resid_pdrop``); Hugging Face's ``Phi3Model`` drops out nothing
    after the embeddings, whatever ``embd_pdrop`` says."""
    fields = {**_llama(c, notes), "rotary_fraction": _rotary_fraction(c)}
    if float(getattr(c, "embd_pdrop", 0.0) or 0.0) > 0:
        notes.append(f"embd_pdrop = {c.embd_pdrop} is not applied by Hugging Face's Phi3Model: no embedding dropout")
    return {**fields, "dropout": float(c.resid_pdrop), "embed_dropout": 0.0}


def _gemma(c, notes: list) -> dict:
    """Gemma (the first generation): Llama's network with the token embedding's output scaled by √d (the tied head
    reads the unscaled table), GeGLU with GELU's tanh form, and RMSNorm holding w in (1 + w), w = 0 at
    initialisation (weight 1, as sigprop's RMSNorm)."""
    fields = _llama(c, notes)
    notes.append("RMSNorm computes x·(1 + w) with w = 0 at initialisation: weight 1, as sigprop's")
    return {**fields, "embed_scale": float(int(c.hidden_size) ** 0.5),
            "activation": _activation(_gemma_activation(c), notes, True)}


def _gemma_activation(c) -> str:
    """The activation Gemma's MLP applies: ``hidden_act`` from transformers 5 on; before, ``hidden_activation``
    (its tanh GELU where unset), whatever ``hidden_act`` says."""
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5:
        return str(c.hidden_act)
    return str(getattr(c, "hidden_activation", None) or "gelu_pytorch_tanh")


_MAPPERS = {"gpt2": _gpt2, "bert": _bert, "roberta": _roberta, "opt": _opt, "llama": _llama, "qwen3": _qwen3,
            "phi3": _phi3, "gemma": _gemma, "gpt_neox": _gpt_neox, "phi": _phi, "vit": _vit}


def map_hf_config(obj, **overrides) -> HFMapping:
    """Map a Hugging Face config, model or local model folder to a :class:`TransformerConfig` (module docstring);
    ``overrides`` set config fields afterwards (e.g. ``seq_len=256``); another ``init`` than the family's drops the
    family's residual scales (λ, β) unless they are given too. ``ValueError`` for a model type or an activation
    sigprop has no rules for, naming it."""
    cfg = _hf_config(obj)
    kind = str(cfg.model_type)
    if kind not in FAMILIES:
        raise ValueError(not_mapped_reason(kind))
    notes: list = []
    fields = _MAPPERS[FAMILIES[kind]](cfg, notes)
    if overrides.get("init", fields.get("init")) != fields.get("init"):  # another scheme: its own λ and β, not the
        for scale in ("lam", "beta"):                                      # family's (GPT-2's β = 1/√(2N))
            if scale not in overrides:
                fields.pop(scale, None)
    fields.update(overrides)
    window = getattr(cfg, "sliding_window", None)  # against the sequence length measured, overrides included
    if window and getattr(cfg, "use_sliding_window", True) and int(window) < int(fields.get("seq_len", 0)):
        notes.append(f"sliding-window attention ({window} tokens, shorter than seq_len {fields['seq_len']}) is not "
                     "modelled")
    return HFMapping(config=TransformerConfig(**fields), notes=tuple(dict.fromkeys(notes)), model_type=kind)


def not_mapped_reason(model_type: str) -> str:
    """Why sigprop has no theory for a Hugging Face ``model_type``: one sentence naming the component it cannot map,
    and that the model is measured all the same."""
    why = NOT_MAPPED.get(model_type, "no mapping of its configuration is written")
    return (f"model_type {model_type!r} is not mapped to sigprop's configuration, so its theory is not available: "
            f"{why} (mapped: {', '.join(FAMILIES)}); it is measured all the same (sigprop measure --hf, "
            "sigprop.measure)")


def from_hf(hf_config_or_model, **overrides) -> TransformerConfig:
    """The sigprop configuration of a Hugging Face config, model or local folder.

    The :class:`~sigprop.model.config.TransformerConfig` that builds the same network at initialisation: the same
    weight shapes, per-role initial standard deviations and placement of norms, residuals and positions (module
    docstring; GPT-2's output projections at initializer_range/√(2·n_layer) become β = 1/√(2·n_layer) on every
    residual). What the mapping leaves out (biases, an approximated activation, …) is issued as one
    ``UserWarning``; :func:`map_hf_config` returns it as a list instead. Needs the extra ``hf`` (transformers);
    nothing is downloaded: a folder is read with ``local_files_only``.

    Args:
        hf_config_or_model: a Hugging Face ``PretrainedConfig``, a model, or the path of a local folder holding
            ``config.json``, of a mapped family (:data:`FAMILIES`).
        **overrides: config fields set after the mapping (e.g. ``seq_len=256``).

    Returns:
        The mapped :class:`~sigprop.model.config.TransformerConfig`.

    Raises:
        ValueError: a model type sigprop has no mapping for (the component it cannot map named:
            :data:`NOT_MAPPED`) or an activation it has no rules for.

    Example:
        >>> import warnings, sigprop
        >>> from transformers import GPT2Config
        >>> hf = GPT2Config(n_layer=2, n_embd=16, n_head=2, n_positions=8, vocab_size=64, bos_token_id=0,
        ...                 eos_token_id=0)
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     config = sigprop.from_hf(hf, seq_len=8)
        >>> config.arch, config.n_layers, config.d_model, config.norm_position, config.init
        ('decoder', 2, 16, 'pre', 'bert')
        >>> round(config.beta ** 2 * 2 * config.n_layers, 6), "biases" in str(caught[0].message)
        (1.0, True)
    """
    mapping = map_hf_config(hf_config_or_model, **overrides)
    if mapping.notes:
        warnings.warn(f"from_hf({mapping.model_type}): " + "; ".join(mapping.notes), UserWarning, stacklevel=2)
    return mapping.config
