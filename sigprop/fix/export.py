"""Export a sigprop model to a Hugging Face checkpoint that plain inference code loads without remote code (and, from
a training run, the tokenizer it trained with: :func:`fold_run`):
``export_hf(model, out_dir, to="gpt2")`` writes a Pre-LN decoder as a GPT-2 model (``config.json`` and
``model.safetensors``), its residual scales folded into the output projections (:mod:`sigprop.fix.fold`).

The correspondence (GPT-2's Conv1D weights are stored (in, out), as sigprop's W_Q, W_K, W_V; sigprop's linear
layers (out, in)): wte = the token table, wpe = the position table, per layer ln_1 / ln_2 = the attention / FFN
norms, attn.c_attn = [W_Q | W_K | W_V] (heads contiguous in both), attn.c_proj = (β/c)·W_Oᵀ, mlp.c_fc = W_1ᵀ,
mlp.c_proj = (β/c)·W_2ᵀ (c the running product of λ), biases zero, ln_f = the final norm with its affine parameters
times the head's output scale, the LM head tied to wte (or its own matrix when sigprop's is untied). GELU is GPT-2's
``activation_function="gelu"`` (the exact form sigprop uses, not GPT-2's default tanh approximation). The exported
model computes the same logits up to the norms' ε (:mod:`sigprop.fix.fold`; exactly for ``norm_eps=0``).

``to="opt"`` writes a Post-LN decoder as an OPT model (``do_layer_norm_before=False``): embed_tokens = the token
table, embed_positions = the position table after OPT's two offset rows (zeros; OPT reads row position + 2), per
layer self_attn.{q,k,v}_proj = W_Qᵀ, W_Kᵀ, W_Vᵀ, out_proj = (β/λ)·W_O, self_attn_layer_norm / final_layer_norm = the
attention / FFN norms, fc1 = W_1, fc2 = (β/λ)·W_2, biases zero, and the head's output scale on the last norm's affine
parameters (Post-LN OPT has no final norm). OPT's LayerNorm ε is fixed at 1e-5, so the model's ``norm_eps`` must be
1e-5; folding β/λ moves each norm's ε to ε/λ² (:mod:`sigprop.fix.fold`), the exported logits' only difference.

``to="llama"`` writes a Llama-style Pre-LN decoder (RMSNorm, SwiGLU, rotary positions, grouped-query heads) as
``LlamaForCausalLM``: embed_tokens = the token table, per layer input_layernorm / post_attention_layernorm = the
attention / FFN norms, self_attn.{q,k,v}_proj = W_Qᵀ, W_Kᵀ, W_Vᵀ (heads contiguous, each key/value head serving
a contiguous group of query heads in both; sigprop's rotary convention is Llama's "rotate_half"), o_proj = (β/c)·W_O,
mlp.gate_proj = W_gateᵀ, up_proj = W_upᵀ, down_proj = (β/c)·W_2, norm = the final norm times the head's output scale,
lm_head the head. Llama's RMSNorm has no bias, so the fold is exact up to the norms' ε as for GPT-2. Llama has no
dropout on its embeddings or residual branches, only on the attention probabilities (``attention_dropout``, written):
the export computes the same function in evaluation, and fine-tuning it trains without the run's other dropout.

``to="bert"`` writes a Post-LN encoder as ``BertForMaskedLM``: word / position / token-type embeddings = the token,
position and segment tables (one zero token-type row without segments), per layer attention.self.{query,key,value}
= W_Qᵀ, W_Kᵀ, W_Vᵀ, attention.output.dense = (β/λ)·W_O, intermediate.dense = W_1, output.dense = (β/λ)·W_2, the two
LayerNorms = the attention / FFN norms, biases zero (ε moves to ε/λ² as for OPT). Two BERT modules may have no
counterpart in sigprop's model:

* the MLM head's transform, LayerNorm(GELU(dense x)), is the model's own where it has one (``head_transform``);
  without, it becomes the identity up to the norm: the last layer's output is x = γ·n + b (n normalised, γ and b
  its norm's weight and bias, 1 and 0 only at initialisation), dense = diag(1/γ) with bias
  s − b/γ gives n + s on every unit, s = :data:`BERT_HEAD_SHIFT` + √(d − 1); a LayerNorm's output has Σn = 0 and
  Σn² ≤ d, so |n_i| ≤ √(d − 1) on every unit (an outlier feature of a trained model included) and GELU's input is
  ≥ 20 (GELU(z) = z to e^{−z²/2}, below 1e-80), the LayerNorm's mean subtraction removes the shift and
  normalises n to itself up to ε, and its weight and bias, γ and b times the head's output scale, give back x;
* the embedding LayerNorm (``bert.embeddings.LayerNorm``) normalises each token's embedding sum, which sigprop's model
  does not, and no weight setting turns it off. The exported model computes sigprop's model with a LayerNorm
  (weight 1, bias 0, the model's ε) applied to the embedding output: exactly that with ε = 0 (tested), and the
  difference to sigprop's own logits is measured in the tests.

Dropout acts in training only and is written as each family holds it: GPT-2's ``embd_pdrop`` is the model's
embedding dropout (``embed_dropout``), BERT's ``hidden_dropout_prob`` serves its embeddings and blocks alike, and OPT
and Llama drop out nothing after their embeddings, whatever the model's ``embed_dropout`` was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.atomic import atomic_path
from ..core.outputs import check_output_folder
from .fold import branch_scales

__all__ = ["export_hf", "fold_run", "run_tokenizer", "EXPORT_TARGETS"]

EXPORT_TARGETS = ("gpt2", "opt", "bert", "llama")

#: The least input of the BERT MLM head's GELU where it stands for the identity: its bias puts every unit at least
#: this far onto GELU's linear branch (module docstring, ``to="bert"``).
BERT_HEAD_SHIFT = 20.0


@dataclass(frozen=True)
class _Target:
    """What a Hugging Face family can hold: its name, the config fields it fixes beyond :data:`_EVERY_TARGET`, and
    whether it ends in a final norm."""

    label: str
    wants: tuple[tuple[str, object], ...]
    final_norm: bool


_EVERY_TARGET = (("input", "tokens"), ("norm", "layernorm"), ("position", "learned"), ("attention", "standard"),
                 ("embed_scale", 1.0), ("qk_norm", False), ("rotary_fraction", 1.0), ("parallel_block", False))
_TARGETS = {"gpt2": _Target("GPT-2", (("arch", "decoder"), ("norm_position", "pre"), ("n_segments", 0),
                                     ("head_transform", False)), True),
            "opt": _Target("OPT", (("arch", "decoder"), ("norm_position", "post"), ("n_segments", 0),
                                   ("norm_eps", 1e-5), ("head_transform", False)), False),
            "bert": _Target("BERT", (("arch", "encoder"), ("norm_position", "post")), False),
            "llama": _Target("Llama", (("arch", "decoder"), ("norm_position", "pre"), ("n_segments", 0),
                                       ("norm", "rmsnorm"), ("position", "rope"), ("activation", "swiglu"),
                                       ("head_transform", False)), True)}


def _check(c, to: str) -> None:
    """``ValueError`` naming every field of config ``c`` that the ``to`` family cannot hold."""
    target = _TARGETS[to]
    wants = dict(_EVERY_TARGET) | dict(target.wants)
    wrong = [f"{field}={getattr(c, field)!r} ({target.label} needs {want!r})"
             for field, want in wants.items() if getattr(c, field) != want]
    if "activation" not in wants and c.activation not in ("gelu", "relu"):
        wrong.append(f"activation={c.activation!r} ({target.label} has gelu or relu)")
    if to != "llama" and (c.kv_heads != c.n_heads or c.d_head * c.n_heads != c.d_model):
        wrong.append(f"grouped-query heads or head_dim != d_model/n_heads ({target.label} has neither)")
    if c.has_final_norm != target.final_norm:
        wrong.append(f"no final norm ({target.label} has one)" if target.final_norm
                     else f"a final norm after a Post-LN stack ({target.label} has none)")
    if wrong:
        raise ValueError(f"cannot export to {target.label}: " + "; ".join(wrong))


def _float(t: torch.Tensor) -> torch.Tensor:
    """A detached copy in float64 if ``t`` is float64, else float32."""
    return t.detach().to(torch.float64 if t.dtype == torch.float64 else torch.float32).clone()


def _check_zero_biases(layer) -> None:
    for linear in (layer.attn.branch.proj, layer.ffn.branch.fc1, layer.ffn.branch.fc2):
        if getattr(linear, "bias", None) is not None and bool(linear.bias.detach().abs().max() > 0):
            raise ValueError(f"layer {layer.index}: a non-zero bias (the export writes zero biases)")


def _post_ln_layers(model, prefix: str, names: tuple[str, ...], scaled_last_norm: bool) -> dict:
    """The per-layer entries of a Post-LN export (OPT, BERT: linear weights stored (out, in)): ``names`` are the
    family's names, under ``prefix`` + the layer index + ".", of W_Q, W_K, W_V, W_O, W_1, W_2 (each with a zero bias)
    and of the attention and FFN norms; β/λ folded into W_O and W_2 (:func:`~sigprop.fix.fold.branch_scales`). With
    ``scaled_last_norm`` the last layer's FFN norm carries the head's output scale (a family without a final norm
    and without a head transform to hold it)."""
    f = _float
    layers = list(model.all_layers())
    state = {}
    for layer, factors in zip(layers, branch_scales(model), strict=True):
        _check_zero_biases(layer)
        attn, ffn = layer.attn.branch, layer.ffn.branch
        p = f"{prefix}{layer.index}."
        weights = (f(attn.attn.w_q).T, f(attn.attn.w_k).T, f(attn.attn.w_v).T, f(attn.proj.weight) * factors["attn"],
                   f(ffn.fc1.weight), f(ffn.fc2.weight) * factors["ffn"])
        for name, w in zip(names[:6], weights, strict=True):
            state[p + name + ".weight"] = w.contiguous()
            state[p + name + ".bias"] = torch.zeros(w.shape[0], dtype=w.dtype)
        for name, norm in zip(names[6:], (layer.attn_norm, layer.ffn_norm), strict=True):
            s = float(model.head_scale) if scaled_last_norm and layer is layers[-1] and norm is layer.ffn_norm else 1.0
            state[p + name + ".weight"], state[p + name + ".bias"] = f(norm.weight) * s, f(norm.bias) * s
    return state


def _opt_state(model) -> tuple[dict, dict]:
    """(OPTConfig keyword arguments, OPT state dict) of a sigprop Post-LN decoder (module docstring)."""
    c = model.config
    _check(c, "opt")
    f = _float
    table = f(model.embed.position.weight)
    state = {"model.decoder.embed_tokens.weight": f(model.embed.token.weight),
             "model.decoder.embed_positions.weight": torch.cat([table.new_zeros(2, c.d_model), table]),
             **_post_ln_layers(model, "model.decoder.layers.",
                               ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
                                "fc1", "fc2", "self_attn_layer_norm", "final_layer_norm"), scaled_last_norm=True),
             "lm_head.weight": f(model.head.weight)}
    kwargs = dict(vocab_size=c.vocab_size, hidden_size=c.d_model, num_hidden_layers=c.n_layers,
                  ffn_dim=c.ffn_width, max_position_embeddings=c.max_len, do_layer_norm_before=False,
                  word_embed_proj_dim=c.d_model, num_attention_heads=c.n_heads, activation_function=c.activation,
                  dropout=c.dropout, attention_dropout=c.p_attn, layerdrop=0.0, enable_bias=True,
                  layer_norm_elementwise_affine=True, tie_word_embeddings=bool(c.tie_head), pad_token_id=None,
                  bos_token_id=None, eos_token_id=None)
    return kwargs, state


def _bert_state(model) -> tuple[dict, dict]:
    """(BertConfig keyword arguments, BertForMaskedLM state dict) of a sigprop Post-LN encoder (module docstring)."""
    c = model.config
    _check(c, "bert")
    f = _float
    token = f(model.embed.token.weight)
    zeros = lambda *shape: torch.zeros(*shape, dtype=token.dtype)  # noqa: E731
    segments = f(model.embed.segment.weight) if model.embed.segment is not None else zeros(1, c.d_model)
    state = {"bert.embeddings.word_embeddings.weight": token,
             "bert.embeddings.position_embeddings.weight": f(model.embed.position.weight),
             "bert.embeddings.token_type_embeddings.weight": segments,
             "bert.embeddings.LayerNorm.weight": zeros(c.d_model) + 1.0,
             "bert.embeddings.LayerNorm.bias": zeros(c.d_model),
             **_post_ln_layers(model, "bert.encoder.layer.",
                               ("attention.self.query", "attention.self.key", "attention.self.value",
                                "attention.output.dense", "intermediate.dense", "output.dense",
                                "attention.output.LayerNorm", "output.LayerNorm"), scaled_last_norm=False)}
    transform = model.head_transform
    if transform is not None:  # the model's own transform; the head's output scale on its LayerNorm
        state["cls.predictions.transform.dense.weight"] = f(transform.dense.weight)
        state["cls.predictions.transform.dense.bias"] = f(transform.dense.bias)
        state["cls.predictions.transform.LayerNorm.weight"] = f(transform.norm.weight) * float(model.head_scale)
        state["cls.predictions.transform.LayerNorm.bias"] = f(transform.norm.bias) * float(model.head_scale)
    else:  # undo the last norm's affine γ·n + b back to n, shifted onto GELU's linear branch; the LayerNorm redoes it
        last = f"bert.encoder.layer.{c.n_layers - 1}.output.LayerNorm."
        gamma, bias = state[last + "weight"], state[last + "bias"]
        if not bool((gamma != 0).all()):
            raise ValueError("--to bert: the last layer's norm has a weight of exactly 0, so BERT's head transform "
                             "cannot recover the normalised stream from its output; give the model a head_transform")
        state["cls.predictions.transform.dense.weight"] = torch.diag(1.0 / gamma)
        shift = BERT_HEAD_SHIFT + math.sqrt(c.d_model - 1)  # |n_i| ≤ √(d − 1) for a LayerNorm's output
        state["cls.predictions.transform.dense.bias"] = shift - bias / gamma
        state["cls.predictions.transform.LayerNorm.weight"] = gamma * float(model.head_scale)
        state["cls.predictions.transform.LayerNorm.bias"] = bias * float(model.head_scale)
    state["cls.predictions.bias"] = zeros(c.vocab_size)
    state["cls.predictions.decoder.weight"] = f(model.head.weight)
    state["cls.predictions.decoder.bias"] = zeros(c.vocab_size)
    kwargs = dict(vocab_size=c.vocab_size, hidden_size=c.d_model, num_hidden_layers=c.n_layers,
                  num_attention_heads=c.n_heads, intermediate_size=c.ffn_width, hidden_act=c.activation,
                  hidden_dropout_prob=c.dropout, attention_probs_dropout_prob=c.p_attn,
                  max_position_embeddings=c.max_len, type_vocab_size=max(c.n_segments, 1),
                  layer_norm_eps=c.norm_eps, tie_word_embeddings=bool(c.tie_head), pad_token_id=None)
    return kwargs, state


def _gpt2_state(model) -> tuple[dict, dict]:
    """(GPT2Config keyword arguments, GPT-2 state dict) of a sigprop Pre-LN decoder (module docstring)."""
    c = model.config
    _check(c, "gpt2")
    f = _float
    zeros = lambda n, like: torch.zeros(n, dtype=like.dtype)  # noqa: E731
    state = {"transformer.wte.weight": f(model.embed.token.weight),
             "transformer.wpe.weight": f(model.embed.position.weight)}
    for layer, factors in zip(model.all_layers(), branch_scales(model), strict=True):
        i = layer.index
        attn, ffn = layer.attn.branch, layer.ffn.branch
        p = f"transformer.h.{i}."
        state[p + "ln_1.weight"], state[p + "ln_1.bias"] = f(attn.norm.weight), f(attn.norm.bias)
        qkv = torch.cat([f(attn.attn.w_q), f(attn.attn.w_k), f(attn.attn.w_v)], dim=1)
        state[p + "attn.c_attn.weight"], state[p + "attn.c_attn.bias"] = qkv, zeros(qkv.shape[1], qkv)
        w_o = f(attn.proj.weight).T * factors["attn"]
        state[p + "attn.c_proj.weight"], state[p + "attn.c_proj.bias"] = w_o.contiguous(), zeros(c.d_model, w_o)
        state[p + "ln_2.weight"], state[p + "ln_2.bias"] = f(ffn.norm.weight), f(ffn.norm.bias)
        w1, w2 = f(ffn.fc1.weight).T.contiguous(), (f(ffn.fc2.weight).T * factors["ffn"]).contiguous()
        state[p + "mlp.c_fc.weight"], state[p + "mlp.c_fc.bias"] = w1, zeros(w1.shape[1], w1)
        state[p + "mlp.c_proj.weight"], state[p + "mlp.c_proj.bias"] = w2, zeros(c.d_model, w2)
        _check_zero_biases(layer)
    s = float(model.head_scale)
    state["transformer.ln_f.weight"] = f(model.final_norm.weight) * s
    state["transformer.ln_f.bias"] = f(model.final_norm.bias) * s
    state["lm_head.weight"] = f(model.head.weight)
    kwargs = dict(vocab_size=c.vocab_size, n_positions=c.max_len, n_embd=c.d_model, n_layer=c.n_layers,
                  n_head=c.n_heads, n_inner=c.ffn_width, activation_function=c.activation, resid_pdrop=c.dropout,
                  embd_pdrop=c.p_embed, attn_pdrop=c.p_attn, layer_norm_epsilon=c.norm_eps,
                  tie_word_embeddings=bool(c.tie_head), scale_attn_weights=True, bos_token_id=None,
                  eos_token_id=None)
    return kwargs, state


def _llama_state(model) -> tuple[dict, dict]:
    """(LlamaConfig keyword arguments, Llama state dict) of a sigprop Llama-style decoder (module docstring)."""
    c = model.config
    _check(c, "llama")
    f = _float
    state = {"model.embed_tokens.weight": f(model.embed.token.weight)}
    for layer, factors in zip(model.all_layers(), branch_scales(model), strict=True):
        attn, ffn = layer.attn.branch, layer.ffn.branch
        p = f"model.layers.{layer.index}."
        state[p + "input_layernorm.weight"] = f(attn.norm.weight)
        for name, w in (("q_proj", attn.attn.w_q), ("k_proj", attn.attn.w_k), ("v_proj", attn.attn.w_v)):
            state[p + f"self_attn.{name}.weight"] = f(w).T.contiguous()
        state[p + "self_attn.o_proj.weight"] = (f(attn.proj.weight) * factors["attn"]).contiguous()
        state[p + "post_attention_layernorm.weight"] = f(ffn.norm.weight)
        state[p + "mlp.gate_proj.weight"] = f(ffn.fc1.w_gate).T.contiguous()
        state[p + "mlp.up_proj.weight"] = f(ffn.fc1.w_up).T.contiguous()
        state[p + "mlp.down_proj.weight"] = (f(ffn.fc2.weight) * factors["ffn"]).contiguous()
        _check_zero_biases(layer)
    state["model.norm.weight"] = f(model.final_norm.weight) * float(model.head_scale)
    state["lm_head.weight"] = f(model.head.weight)
    kwargs = dict(vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.ffn_width,
                  num_hidden_layers=c.n_layers, num_attention_heads=c.n_heads, num_key_value_heads=c.kv_heads,
                  head_dim=c.d_head, hidden_act="silu", max_position_embeddings=c.max_len, rms_norm_eps=c.norm_eps,
                  rope_theta=c.rope_theta, attention_dropout=c.p_attn, attention_bias=False, mlp_bias=False,
                  tie_word_embeddings=bool(c.tie_head), bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return kwargs, state


def export_hf(model, out_dir, to: str = "gpt2", tokenizer=None) -> Path:
    """Write ``model`` (a sigprop :class:`~sigprop.model.transformer.Transformer`) as a Hugging Face ``to`` checkpoint
    in ``out_dir`` (created; written to a temporary folder beside it and renamed, so a failure leaves nothing
    half-written), safetensors only; with ``tokenizer`` (the ``tokenizers.Tokenizer`` the model was trained with) its
    ``tokenizer.json`` and ``tokenizer_config.json`` beside it
    (:func:`~sigprop.data.tokenizer.write_hf_tokenizer`). Returns the folder. ``ValueError`` naming what does not
    map, or for an ``out_dir`` it could not replace without deleting what is not an export (a training run or an
    experiment's runs inside it, or a non-empty folder that holds anything but a checkpoint's own files)."""
    if to not in EXPORT_TARGETS:
        raise ValueError(f"to must be one of {', '.join(EXPORT_TARGETS)} (got {to!r})")
    _check_not_a_run(Path(out_dir))
    import transformers

    if to == "gpt2":
        kwargs, state = _gpt2_state(model)
        hf_model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kwargs))
    elif to == "opt":
        kwargs, state = _opt_state(model)
        hf_model = transformers.OPTForCausalLM(transformers.OPTConfig(**kwargs))
    elif to == "llama":
        kwargs, state = _llama_state(model)
        hf_model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**kwargs))
    else:
        kwargs, state = _bert_state(model)
        hf_model = transformers.BertForMaskedLM(transformers.BertConfig(**kwargs))
    hf_model = hf_model.to(next(iter(state.values())).dtype)
    missing, unexpected = hf_model.load_state_dict(state, strict=False)
    tied = ("lm_head.weight", "cls.predictions.decoder.weight") if kwargs["tie_word_embeddings"] else ()
    missing = [k for k in missing if not k.endswith(".attn.bias") and not k.endswith("masked_bias")
               and k not in tied]
    if missing or unexpected:
        raise RuntimeError(f"{to} state mismatch: missing {missing}, unexpected {unexpected}")
    out = Path(out_dir)
    with atomic_path(out, folder=True) as tmp:
        hf_model.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            from ..data.tokenizer import write_hf_tokenizer

            write_hf_tokenizer(tokenizer, tmp, model.config.max_len)
    return out


def _check_not_a_run(out: Path, run_dir: Path | None = None) -> None:
    """``ValueError`` where writing the export folder ``out`` (which replaces it whole) could delete what is not an
    export: ``out`` is ``run_dir`` or a folder above it, holds a training run anywhere inside (``run.json``, an
    experiment's folder of runs), or is a non-empty folder that is not a Hugging Face checkpoint (no
    ``config.json``, or any file or folder that is not a checkpoint's own: :data:`_CHECKPOINT_NAMES`)."""
    target = out.resolve()
    if run_dir is not None and (target == run_dir.resolve() or target in run_dir.resolve().parents):
        raise ValueError(f"{out} is the run folder {run_dir} or holds it; the export replaces its folder whole: "
                         "write it to another folder")
    if target.is_file():
        raise ValueError(f"{out} is a file; the export writes a folder")
    if not target.is_dir() or not any(target.iterdir()):
        return
    if next(target.rglob("run.json"), None) is not None:
        raise ValueError(f"{out} holds a training run (run.json); the export replaces its folder whole: write it to "
                         "another folder")
    if not (target / "config.json").is_file():
        raise ValueError(f"{out} is a folder that is not a Hugging Face checkpoint (no config.json); the export "
                         "replaces its folder whole: write it to a new or empty folder")
    other = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir() if not _checkpoint_file(p))
    if other:
        shown = ", ".join(other[:5]) + (f" and {len(other) - 5} more" if len(other) > 5 else "")
        raise ValueError(f"{out} holds files that are not a Hugging Face checkpoint's ({shown}); the export "
                         "replaces its folder whole: write it to a new or empty folder")


#: The files of a Hugging Face checkpoint folder (weights, configs, tokenizer), which an export may replace.
_CHECKPOINT_NAMES = frozenset({
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "pytorch_model.bin", "pytorch_model.bin.index.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model"})


def _checkpoint_file(path: Path) -> bool:
    """Whether ``path`` is one of a Hugging Face checkpoint's own files (sharded weights included)."""
    if not path.is_file():
        return False
    name = path.name
    return name in _CHECKPOINT_NAMES or (name.startswith(("model-", "pytorch_model-"))
                                         and name.endswith((".safetensors", ".bin")))


def fold_run(run_dir, out_dir, to: str = "hf-gpt2") -> tuple[Path, int, str]:
    """``sigprop fold``: the newest checkpoint of the training run in ``run_dir`` (its configs from ``run.json``, the
    checkpoint's SHA-256, model config and tensor shapes checked) folded and exported as ``to`` ("hf-gpt2" for a
    Pre-LN decoder, "hf-opt" for a Post-LN one, "hf-bert" for a Post-LN encoder, "hf-llama" for a Llama-style
    decoder: RMSNorm, SwiGLU, rotary positions) into ``out_dir``, with the tokenizer
    the run trained with (the one of its corpus and vocabulary size, from the local cache or trained again). Returns
    (the folder, the checkpoint's step, what was written of the tokenizer). ``ValueError`` for a run without a
    checkpoint, a model the target cannot hold, or an ``out_dir`` that is the run's folder, holds it or holds another
    run, before anything is written."""
    from ..train.run_dir import newest_checkpoint, read_run, trained_model

    targets = {f"hf-{t}": t for t in EXPORT_TARGETS}
    if to not in targets:
        raise ValueError(f"--to must be one of {', '.join(targets)} (got {to!r})")
    _check_not_a_run(Path(out_dir), Path(run_dir))
    check_output_folder(Path(out_dir).absolute().parent, "OUT (its folder, where the checkpoint is written and "
                        "renamed into place)")  # before the model is read and converted
    config, train_config, _ = newest_checkpoint(Path(run_dir), "fold")
    _check(config, targets[to])  # before the weights are read
    tokenizer, said = run_tokenizer(config, train_config.data)
    if tokenizer is not None:
        changed = _corpus_changed(config, train_config, read_run(Path(run_dir)).get("data"))
        if changed is not None:
            tokenizer, said = None, f"no tokenizer: {changed}, so a tokenizer rebuilt from it would not be the run's"
    model, _, step = trained_model(Path(run_dir), "fold")
    return export_hf(model, out_dir, to=targets[to], tokenizer=tokenizer), step, said


def _corpus_changed(config, train_config, recorded) -> str | None:
    """Why the corpus as it reads today is not the one the run trained on (the data fingerprint its ``run.json``
    records differs from the corpus's now), or None where it is the same or the run recorded no fingerprint. A pinned
    corpus is its stored ids, the same by construction."""
    from ..data.fingerprint import data_fingerprint, same_data
    from ..data.pinned import is_pinned

    if is_pinned(train_config.data) or data_fingerprint(recorded) is None:
        return None
    from ..train.data import make_data

    try:
        now = make_data(config, train_config, progress=True).meta()
    except (ValueError, OSError) as err:
        return f"the run's corpus cannot be read ({err})"
    if same_data(recorded, now):
        return None
    return (f"the run's corpus {train_config.data!r} has changed since it trained (run.json's data fingerprint "
            "differs from the corpus's now)")


def run_tokenizer(config, data):
    """The tokenizer a training run of ``config`` on ``data`` read its ids with, and what to say of it: a pinned
    corpus's own (``corpora/NAME/tokenizer.json``, :mod:`sigprop.data.pinned`), else the byte-level BPE of the
    corpus and vocabulary size (from the local cache or trained again); None for a patch model, or where the corpus
    cannot be read."""
    if config.input != "tokens":
        return None, "no tokenizer (the model reads images)"
    from ..data.pinned import is_pinned, pinned_corpus
    from ..data.tokenizer import load_or_train_tokenizer

    try:
        if is_pinned(data):
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(pinned_corpus(data).tokenizer_path))
        else:
            tokenizer = load_or_train_tokenizer(data, config.vocab_size)
    except (ValueError, OSError) as err:
        return None, f"no tokenizer: the run's corpus cannot be read to rebuild it ({err})"
    return tokenizer, "tokenizer.json: the run's tokenizer (AutoTokenizer.from_pretrained gives its ids)"
