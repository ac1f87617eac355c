"""Where each sigprop weight role lives in a Hugging Face model: one layout per mapped family, read by
:func:`read_hf_plan` (the plan a saved model's weights show, for the theory) and written by
:func:`sigprop.fix.apply_init.apply_init` (a scheme's draws), so that the two cannot disagree on the layout.

A layout lists, in a fixed order (the order :func:`~sigprop.fix.apply_init.apply_init` draws in, so that a seed gives
the same model), every weight as a :class:`Slot`: its role (:data:`sigprop.model.roles.ROLES`: ``token``,
``position``, ``q``, ``k``, ``v``, ``o``, ``w1``, ``w3``, ``w2``, ``head``), its layer (``None`` for the embedding
tables and the head) and the tensor (a view: GPT-2's fused ``c_attn`` holds W_Q, W_K and W_V side by side); with it
the biases (zero at initialisation) and the norms (weight 1, bias 0; the final norm's weight is the head scale).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["check_covered", "Slot", "HFWeights", "hf_weights", "read_hf_plan", "LAYOUTS"]


@dataclass(frozen=True)
class Slot:
    """One weight of a role: ``tensor`` is the parameter or a view of it."""

    role: str
    layer: int | None
    tensor: torch.Tensor


@dataclass(frozen=True)
class HFWeights:
    """A Hugging Face model's weights by role (module docstring).

    Attributes:
        slots: the weights, in drawing order.
        biases: (name, module) of every linear map whose bias the theory takes to be zero.
        norms: (name, module) of the blocks' norms (weight 1, bias 0 at initialisation).
        final_norm: the norm whose weight carries the head scale (the final norm; a masked LM's head-transform
            LayerNorm), or ``None`` where the model has none.
        head: the untied output embedding's module, or ``None`` when it is the token table.
        gain_offset: what a norm's gain is above its stored weight (Gemma stores w and scales by 1 + w: 1; else 0).
    """

    slots: tuple[Slot, ...]
    biases: tuple[tuple[str, nn.Module], ...]
    norms: tuple[tuple[str, nn.Module], ...]
    final_norm: nn.Module | None
    head: nn.Module | None
    gain_offset: float = 0.0


def _head(model) -> nn.Module | None:
    head = model.get_output_embeddings()
    if head is None or head.weight is model.get_input_embeddings().weight:
        return None
    return head


def _layout(model, slots: list, biases: list, norms: list, final_norm) -> HFWeights:
    """The :class:`HFWeights` of these slots, biases and norms, with an untied head's weight as the last slot."""
    head = _head(model)
    if head is not None:
        slots = [*slots, Slot("head", None, head.weight)]
    return HFWeights(tuple(slots), tuple(biases), tuple(norms), final_norm, head)


#: A Llama-style block's two norms (before attention, before the MLP).
_LLAMA_NORMS = ("input_layernorm", "post_attention_layernorm")
#: A Llama-style block's linear maps: (path in the block, role), in drawing order.
_LLAMA_PROJECTIONS = (("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"), ("self_attn.v_proj", "v"),
                      ("self_attn.o_proj", "o"), ("mlp.gate_proj", "w1"), ("mlp.up_proj", "w3"),
                      ("mlp.down_proj", "w2"))


def _gpt2(model) -> HFWeights:
    """GPT-2 (Conv1D weights stored (in, out)): c_attn = [W_Q | W_K | W_V], c_proj, mlp.c_fc, mlp.c_proj."""
    base = getattr(model, "transformer", model)
    d = base.wte.weight.shape[1]
    slots = [Slot("token", None, base.wte.weight), Slot("position", None, base.wpe.weight)]
    biases, norms = [], []
    for i, block in enumerate(base.h):
        qkv = block.attn.c_attn.weight
        slots += [Slot(role, i, qkv[:, j * d:(j + 1) * d]) for j, role in enumerate(("q", "k", "v"))]
        slots += [Slot("o", i, block.attn.c_proj.weight), Slot("w1", i, block.mlp.c_fc.weight),
                  Slot("w2", i, block.mlp.c_proj.weight)]
        biases += [(f"h.{i}.{name}", m) for name, m in (
            ("attn.c_attn", block.attn.c_attn), ("attn.c_proj", block.attn.c_proj), ("mlp.c_fc", block.mlp.c_fc),
            ("mlp.c_proj", block.mlp.c_proj))]
        norms += [(f"h.{i}.ln_1", block.ln_1), (f"h.{i}.ln_2", block.ln_2)]
    return _layout(model, slots, biases, norms, base.ln_f)


def _blocks(slots: list, layers, projections: tuple[tuple[str, str], ...], norms: tuple[str, ...],
            prefix: str = "layers", short_names: bool = False) -> tuple[list, list]:
    """The blocks of a stack in which each weight of a role is one linear map's: block by block, the slot of each
    of ``projections`` ((its path in the block, its role), in drawing order) appended to ``slots``, its bias and the
    block's ``norms`` (their paths) named under ``prefix.i`` (a bias by the map's own name alone with
    ``short_names``). Returns (biases, norms)."""
    biases: list = []
    block_norms: list = []
    for i, block in enumerate(layers):
        for path, role in projections:
            proj = block.get_submodule(path)
            slots.append(Slot(role, i, proj.weight))
            biases.append((f"{prefix}.{i}.{path.rsplit('.', 1)[-1] if short_names else path}", proj))
        block_norms += [(f"{prefix}.{i}.{path}", block.get_submodule(path)) for path in norms]
    return biases, block_norms


def _llama(model) -> HFWeights:
    """Llama / Qwen2 / Mistral (nn.Linear weights stored (out, in)): q/k/v/o_proj, gate_proj = W_1, up_proj = W_3,
    down_proj = W_2."""
    base = getattr(model, "model", model)
    slots = [Slot("token", None, base.embed_tokens.weight)]
    biases, norms = _blocks(slots, base.layers, _LLAMA_PROJECTIONS, _LLAMA_NORMS, short_names=True)
    return _layout(model, slots, biases, norms, base.norm)


def _qwen3(model) -> HFWeights:
    """Qwen3: Llama's layout, with each block's QK-norm (``q_norm``, ``k_norm``: gains 1 at initialisation) among
    the norms."""
    layout = _llama(model)
    base = getattr(model, "model", model)
    qk = [(f"layers.{i}.self_attn.{name}", getattr(block.self_attn, name)) for i, block in enumerate(base.layers)
          for name in ("q_norm", "k_norm")]
    return HFWeights(layout.slots, layout.biases, (*layout.norms, *qk), layout.final_norm, layout.head)


def _gpt_neox(model) -> HFWeights:
    """GPT-NeoX (nn.Linear weights stored (out, in)): ``query_key_value`` holds, head by head, the rows of W_Q, W_K
    and W_V of that head (``view(heads, 3·head_size)`` then ``chunk(3)``), ``dense`` = W_O,
    ``mlp.dense_h_to_4h`` = W_1, ``mlp.dense_4h_to_h`` = W_2; ``embed_in`` the token table, an untied ``embed_out``."""
    base = getattr(model, "gpt_neox", model)
    heads = model.config.num_attention_heads
    slots = [Slot("token", None, base.embed_in.weight)]
    biases, norms = [], []
    for i, block in enumerate(base.layers):
        attn, mlp = block.attention, block.mlp
        qkv = attn.query_key_value.weight
        per_head = qkv.view(heads, 3, qkv.shape[0] // (3 * heads), qkv.shape[1])  # a view: written in place
        slots += [Slot(role, i, per_head[:, j]) for j, role in enumerate(("q", "k", "v"))]
        slots += [Slot("o", i, attn.dense.weight), Slot("w1", i, mlp.dense_h_to_4h.weight),
                  Slot("w2", i, mlp.dense_4h_to_h.weight)]
        biases += [(f"layers.{i}.{name}", m) for name, m in (
            ("attention.query_key_value", attn.query_key_value), ("attention.dense", attn.dense),
            ("mlp.dense_h_to_4h", mlp.dense_h_to_4h), ("mlp.dense_4h_to_h", mlp.dense_4h_to_h))]
        norms += [(f"layers.{i}.input_layernorm", block.input_layernorm),
                  (f"layers.{i}.post_attention_layernorm", block.post_attention_layernorm)]
    return _layout(model, slots, biases, norms, base.final_layer_norm)


def _phi(model) -> HFWeights:
    """Phi-1/2 (nn.Linear weights stored (out, in)): q/k/v_proj, ``dense`` = W_O, mlp.fc1 = W_1, mlp.fc2 = W_2, one
    ``input_layernorm`` per block (read by both branches), ``final_layernorm``, an untied ``lm_head`` with a bias."""
    base = getattr(model, "model", model)
    slots = [Slot("token", None, base.embed_tokens.weight)]
    biases, norms = _blocks(slots, base.layers, (
        ("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"), ("self_attn.v_proj", "v"), ("self_attn.dense", "o"),
        ("mlp.fc1", "w1"), ("mlp.fc2", "w2")), ("input_layernorm",))
    head = _head(model)
    if head is not None and getattr(head, "bias", None) is not None:
        biases.append(("lm_head", head))
    return _layout(model, slots, biases, norms, base.final_layernorm)


def _vit(model) -> HFWeights:
    """ViT (nn.Linear weights stored (out, in)): the patch convolution's kernel (d, C, P, P) = the patch map, the
    [CLS] vector, the position table, q/k/v/o_proj, mlp.fc1 = W_1, mlp.fc2 = W_2, the classifier = the head."""
    base = getattr(model, "vit", model)
    emb = base.embeddings
    slots = [Slot("patch", None, emb.patch_embeddings.projection.weight), Slot("cls", None, emb.cls_token),
             Slot("position", None, emb.position_embeddings)]
    biases, norms = _blocks(slots, base.layers, (
        ("attention.q_proj", "q"), ("attention.k_proj", "k"), ("attention.v_proj", "v"), ("attention.o_proj", "o"),
        ("mlp.fc1", "w1"), ("mlp.fc2", "w2")), ("layernorm_before", "layernorm_after"))
    biases.insert(0, ("embeddings.patch_embeddings.projection", emb.patch_embeddings.projection))
    head = getattr(model, "classifier", None)
    if isinstance(head, nn.Linear):
        slots.append(Slot("head", None, head.weight))
        biases.append(("classifier", head))
    return HFWeights(tuple(slots), tuple(biases), tuple(norms), base.layernorm, head)


def _gemma(model) -> HFWeights:
    """Gemma: Llama's layout, with RMSNorms that scale by 1 + w (w = 0 at gain 1)."""
    layout = _llama(model)
    return HFWeights(layout.slots, layout.biases, layout.norms, layout.final_norm, layout.head, gain_offset=1.0)


def _post_ln_encoder(model, base, head: str, transform: nn.Module, transform_norm: nn.Module,
                     head_bias: nn.Module) -> HFWeights:
    """BERT and RoBERTa (nn.Linear weights stored (out, in)): word / position / token-type embeddings = the token,
    position and segment tables, per layer attention.self.{query,key,value}, attention.output.dense = W_O,
    intermediate.dense = W_1, output.dense = W_2, the masked-LM head's transform dense = the ``transform`` role; the
    embedding LayerNorm and the layers' two LayerNorms at weight 1, bias 0; the transform's LayerNorm carries the head
    scale (sigprop scales the head's input after the transform)."""
    emb = base.embeddings
    slots = [Slot("token", None, emb.word_embeddings.weight), Slot("position", None, emb.position_embeddings.weight)]
    if getattr(model.config, "type_vocab_size", 0):
        slots.append(Slot("segment", None, emb.token_type_embeddings.weight))
    biases, norms = _blocks(slots, base.encoder.layer, (
        ("attention.self.query", "q"), ("attention.self.key", "k"), ("attention.self.value", "v"),
        ("attention.output.dense", "o"), ("intermediate.dense", "w1"), ("output.dense", "w2")),
        ("attention.output.LayerNorm", "output.LayerNorm"), prefix="encoder.layer")
    norms.insert(0, ("embeddings.LayerNorm", emb.LayerNorm))
    slots.append(Slot("transform", None, transform.weight))
    biases += [(f"{head}.{'transform.dense' if head == 'cls.predictions' else 'dense'}", transform),
               (head, head_bias)]
    return _layout(model, slots, biases, norms, transform_norm)


def _bert(model) -> HFWeights:
    """BERT (``BertForMaskedLM``): :func:`_post_ln_encoder` with ``cls.predictions`` as the head."""
    head = model.cls.predictions
    return _post_ln_encoder(model, model.bert, "cls.predictions", head.transform.dense, head.transform.LayerNorm, head)


def _roberta(model) -> HFWeights:
    """RoBERTa (``RobertaForMaskedLM``): :func:`_post_ln_encoder` with ``lm_head`` (dense, layer_norm, the tied
    decoder and its bias) as the head."""
    head = model.lm_head
    return _post_ln_encoder(model, model.roberta, "lm_head", head.dense, head.layer_norm, head)


def _phi3(model) -> HFWeights:
    """Phi-3 (nn.Linear weights stored (out, in)): qkv_proj = [W_Q; W_K; W_V] by rows, o_proj, gate_up_proj =
    [W_1; W_3] by rows (gate first), down_proj = W_2."""
    base = getattr(model, "model", model)
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    q_rows = cfg.num_attention_heads * head_dim
    kv_rows = (cfg.num_key_value_heads or cfg.num_attention_heads) * head_dim
    ff = cfg.intermediate_size
    slots = [Slot("token", None, base.embed_tokens.weight)]
    biases, norms = [], []
    for i, block in enumerate(base.layers):
        attn, mlp = block.self_attn, block.mlp
        qkv, gate_up = attn.qkv_proj.weight, mlp.gate_up_proj.weight
        slots += [Slot("q", i, qkv[:q_rows]), Slot("k", i, qkv[q_rows:q_rows + kv_rows]),
                  Slot("v", i, qkv[q_rows + kv_rows:]), Slot("o", i, attn.o_proj.weight),
                  Slot("w1", i, gate_up[:ff]), Slot("w3", i, gate_up[ff:]), Slot("w2", i, mlp.down_proj.weight)]
        biases += [(f"layers.{i}.{name}", m) for name, m in (("qkv_proj", attn.qkv_proj), ("o_proj", attn.o_proj),
                                                              ("gate_up_proj", mlp.gate_up_proj),
                                                              ("down_proj", mlp.down_proj))]
        norms += [(f"layers.{i}.{path}", block.get_submodule(path)) for path in _LLAMA_NORMS]
    return _layout(model, slots, biases, norms, base.norm)


def _opt(model) -> HFWeights:
    """OPT with LayerNorm before each branch (nn.Linear weights stored (out, in)): q/k/v_proj, out_proj, fc1 = W_1,
    fc2 = W_2; its position table (2 rows more than its context) is the ``position`` role."""
    if not model.config.do_layer_norm_before:
        raise ValueError("an OPT with LayerNorm after each branch (do_layer_norm_before=False, as OPT-350m) has "
                         "Post-LN blocks, which are not mapped to a scheme's weights yet")
    base = model.model.decoder if hasattr(model, "model") else model.decoder
    slots = [Slot("token", None, base.embed_tokens.weight), Slot("position", None, base.embed_positions.weight)]
    biases, norms = _blocks(slots, base.layers, (
        ("self_attn.q_proj", "q"), ("self_attn.k_proj", "k"), ("self_attn.v_proj", "v"), ("self_attn.out_proj", "o"),
        ("fc1", "w1"), ("fc2", "w2")), ("self_attn_layer_norm", "final_layer_norm"), short_names=True)
    return _layout(model, slots, biases, norms, getattr(base, "final_layer_norm", None))


#: Mapped family (:data:`sigprop.hf.config_map.FAMILIES`) → its layout.
LAYOUTS = {"gpt2": _gpt2, "bert": _bert, "roberta": _roberta, "llama": _llama, "qwen3": _qwen3, "phi3": _phi3,
           "gemma": _gemma, "opt": _opt, "gpt_neox": _gpt_neox, "phi": _phi, "vit": _vit}
#: Mapped families without a layout, and why (every mapped family has one).
NO_LAYOUT: dict = {}


def hf_weights(model: nn.Module) -> HFWeights:
    """The weights of a Hugging Face model by role (module docstring).

    Args:
        model: a Hugging Face model of a family with a layout (:data:`LAYOUTS`).

    Returns:
        Its slots, biases and norms.

    Raises:
        ValueError: a family without a layout, naming why.
    """
    from .config_map import FAMILIES

    kind = getattr(getattr(model, "config", None), "model_type", None)
    family = FAMILIES.get(kind)
    if family not in LAYOUTS:
        why = NO_LAYOUT.get(family, f"its configuration is not mapped to sigprop's (mapped: "
                                    f"{', '.join(sorted(FAMILIES))})")
        raise ValueError(f"the weights of a Hugging Face {kind!r} model are not mapped to sigprop's roles: {why}")
    try:
        layout = LAYOUTS[family](model)
    except AttributeError as err:  # e.g. a BERT body or classifier where the layout reads a masked-LM head
        raise ValueError(f"the weights of a Hugging Face {type(model).__name__} are not mapped to sigprop's roles: "
                         f"its {kind!r} layout is that of the language-model class ({err})") from None
    return layout


def check_covered(model: nn.Module, layout: HFWeights) -> None:
    """``ValueError`` naming the model's parameters that no slot, bias, norm or head of ``layout`` holds (a head
    other than the language model's, a pooler): what re-initialising the model would leave at its own draw.

    Args:
        model: the Hugging Face model.
        layout: its :func:`hf_weights`.

    Raises:
        ValueError: some parameter is not held, naming up to four.
    """
    left = _uncovered(model, layout)
    if left:
        raise ValueError(f"the weights of a Hugging Face {type(model).__name__} are not all mapped to sigprop's "
                         f"roles: {', '.join(left[:4])}{', …' if len(left) > 4 else ''} (a head other than the "
                         "language model's?)")


def _uncovered(model: nn.Module, layout: HFWeights) -> list[str]:
    """The model's parameters that no slot, bias, norm or head of ``layout`` holds (a slot may be a slice of a
    fused matrix: a parameter counts as held when a slot shares its storage)."""
    held = {slot.tensor.untyped_storage().data_ptr() for slot in layout.slots}
    modules = [m for _, m in layout.biases] + [m for _, m in layout.norms]
    modules += [m for m in (layout.final_norm, layout.head) if m is not None]
    for module in modules:
        held |= {p.untyped_storage().data_ptr() for p in module.parameters()}
    return [name for name, p in model.named_parameters() if p.untyped_storage().data_ptr() not in held]


def _off(tensor: torch.Tensor, value: float) -> bool:
    return not bool(torch.all(tensor.detach() == value))


def read_hf_plan(model: nn.Module, config):
    """The plan a Hugging Face model's weights show, for the theory of its mapped ``config``: each role's standard
    deviation read as the root mean square of its weights, layer by layer; λ = β = 1 on every residual (a mapped
    residual scale such as GPT-2's β = 1/√(2N) sits in the output projections' weights, which are read as they are);
    the head scale from the final norm's mean weight.

    Trained weights break the theory's assumptions (i.i.d. zero-mean weights, zero biases, norms at weight 1): the
    plan is then an approximation, and its ``notes["approximations"]`` says where.

    Args:
        model: a Hugging Face model of a family with a layout.
        config: its mapped :class:`~sigprop.model.config.TransformerConfig`.

    Returns:
        The :class:`~sigprop.model.init.InitPlan` (``notes["source"]``: read from the weights).

    Raises:
        ValueError: a family without a layout; weights on the meta device.
    """
    from ..model.init import TRAINED_WEIGHTS, InitPlan
    from ..model.roles import role_stds

    layout = hf_weights(model)
    if any(slot.tensor.is_meta for slot in layout.slots):
        raise ValueError("the model's weights are on the meta device: there is nothing to read")
    stds = role_stds(((slot.role, slot.layer, slot.tensor) for slot in layout.slots), config.total_layers)
    approximations = []
    biased = [name for name, m in layout.biases if getattr(m, "bias", None) is not None and _off(m.bias, 0.0)]
    if biased:
        approximations.append(f"{len(biased)} of {len(layout.biases)} linear maps have non-zero biases "
                              f"(e.g. {biased[0]}), which the theory takes to be zero")
    unit = 1.0 - layout.gain_offset  # the stored weight of a gain of 1
    moved = [name for name, m in layout.norms if (getattr(m, "weight", None) is not None and _off(m.weight, unit))
             or (getattr(m, "bias", None) is not None and _off(m.bias, 0.0))]
    if moved:
        approximations.append(f"{len(moved)} of {len(layout.norms)} norms are off weight 1 / bias 0 (e.g. "
                              f"{moved[0]}), which the theory takes them to be")
    # a weight's mean in standard errors of the mean of i.i.d. zero-mean draws: beyond 6, no fresh draw has it
    z = [abs(float(s.tensor.detach().double().mean())) * s.tensor.numel() ** 0.5
         / max(float(stds[s.role] if s.layer is None else stds[s.role][s.layer]), 1e-300) for s in layout.slots]
    if max(z) > 6.0:
        approximations.append(f"some weights have a mean {max(z):.3g} standard errors away from zero (the theory "
                              "takes them to be zero-mean and i.i.d.)")
    final_weight = getattr(layout.final_norm, "weight", None)
    head_scale = 1.0 if final_weight is None else float(final_weight.detach().double().mean()) + layout.gain_offset
    if approximations:
        approximations.append(TRAINED_WEIGHTS)
    plan = InitPlan.from_stds(config.replace(lam=None, beta=None), stds, lam={s: 1.0 for s in ("attn", "ffn")},
                              beta={s: 1.0 for s in ("attn", "ffn")}, head_scale=head_scale)
    plan.notes.update(source="read from the Hugging Face model's weights", approximations=approximations)
    return plan
