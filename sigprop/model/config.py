"""TransformerConfig: every hyper-parameter of a sigprop model, with its default written once and validated in one
place (:meth:`TransformerConfig.__post_init__`)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal, get_args

from ..components.factory import ACTIVATIONS, ATTENTIONS, NORMS
from ..components.shaped_relu import SHAPED_MODES
from ..core.overrides import DictConfig, apply_field_overrides, dataclass_from_dict
from ..core.validate import check_boolean, check_choice, check_integer, check_number
from .init_schemes import SCHEME_NAMES, InitScheme, scheme_info

__all__ = ["TransformerConfig", "ARCHS", "INPUTS", "POOLS", "NORM_POSITIONS", "POSITIONS", "V_INITS", "MAX_DROPOUT",
           "MAX_NUMBER",
           "config_from_dict", "apply_overrides"]

Arch = Literal["encoder", "decoder", "encoder_decoder"]
ARCHS: tuple[Arch, ...] = get_args(Arch)
#: The largest dropout probability: the rules are verified up to 0.9 (Kedia et al. Table 22's range), and near 1 a
#: sampled rule keeps no signal to estimate.
MAX_DROPOUT = 0.9
#: Every real-valued field that enters the rules' arithmetic is below this: larger values only overflow their float64
#: arithmetic (the rotary base, which only sets frequencies, is not bounded).
MAX_NUMBER = 1e6
Input = Literal["tokens", "patches"]
INPUTS: tuple[Input, ...] = get_args(Input)
#: How a patch model's classifier reads its tokens: their mean (Kedia et al. App. H) or a learned [CLS] token
#: prepended to the patches (Dosovitskiy et al.; Hugging Face's ``ViTForImageClassification``).
Pool = Literal["mean", "cls"]
POOLS: tuple[Pool, ...] = get_args(Pool)
NormPosition = Literal["pre", "post", "none"]
NORM_POSITIONS: tuple[NormPosition, ...] = get_args(NormPosition)
VInit = Literal["scheme", "noci"]
V_INITS: tuple[VInit, ...] = get_args(VInit)
#: Position information: a learned table added to the embedding, rotary embedding of queries and keys, or none.
Position = Literal["learned", "rope", "none"]
POSITIONS: tuple[Position, ...] = get_args(Position)


@dataclass(frozen=True)
class TransformerConfig(DictConfig):
    """A transformer (Kedia et al. Sec. 2, App. B; Vaswani et al.) as sigprop builds it from its components.

    Frozen, and validated in one place when it is made (``__post_init__``): every real number below
    :data:`MAX_NUMBER` (1e6) in absolute value, dropout at most :data:`MAX_DROPOUT` (0.9), booleans true or false,
    ``lam`` and ``beta`` not both 0. Each layer is an attention block and an FFN block, each wrapped in a residual
    y = λ·x + β·f(x); ``norm_position`` places the norm inside the branch (Pre-LN), after the residual add (Post-LN)
    or nowhere. ``replace(**changes)`` is a validated copy, ``to_dict()`` / ``to_json()`` its plain form
    (:func:`config_from_dict` reads it back).

    Attributes:
        arch: ``"encoder"`` (bidirectional attention, masked-LM head), ``"decoder"`` (causal attention, next-token
            head) or ``"encoder_decoder"`` (an encoder of ``n_layers`` and a decoder of ``n_decoder_layers`` with
            cross-attention).
        input: ``"tokens"`` (token + learned position + ``n_segments`` segment embeddings) or ``"patches"`` (a linear
            embedding of ``patch_size``² × ``channels`` image patches plus learned positions, App. H).
        vocab_size: the token vocabulary (token input).
        max_len: rows of the learned position table; ``seq_len`` must not exceed it (token input).
        n_segments: segment (BERT token-type) embeddings; 0 = none.
        image_size: the side of a square input image, in pixels (patch input; divisible by ``patch_size``).
        patch_size: the side of a square patch, in pixels.
        channels: the image's channels.
        n_classes: the classifier's classes (patch input).
        n_layers: layers of the (encoder) stack, N.
        n_decoder_layers: an encoder–decoder's decoder layers (None = ``n_layers``).
        d_model: the width d of the residual stream.
        n_heads: attention (query) heads.
        n_kv_heads: key/value heads (None = ``n_heads``), each serving ``n_heads/n_kv_heads`` query heads:
            grouped-query attention, multi-query at 1.
        head_dim: the width of a head (None = ``d_model/n_heads``), independent of ``d_model`` when set.
        position: ``"learned"`` (a position table), ``"rope"`` (no table; every self-attention's queries and keys
            rotated by their positions: :mod:`sigprop.components.rope`; Touvron et al. 2023) or ``"none"`` (no
            position information).
        rope_theta: the rotary base of ``position="rope"``.
        d_ff: the FFN's hidden width, d → ``d_ff`` → d (None = 4d).
        activation: relu, gelu, shaped_relu, or a gated unit, ``"swiglu"`` / ``"geglu"``, whose d → d_ff half is
            φ(x W_gate) ⊙ (x W_up) as in Llama-style models (:mod:`sigprop.components.glu`).
        dropout: after the embeddings and every block (≤ 0.9).
        attn_dropout: on the attention probabilities (None = ``dropout``).
        embed_dropout: after the embeddings (None = ``dropout``; OPT and Phi-3 apply none there, GPT-2 and Phi their
            ``embd_pdrop``).
        norm: layernorm / rmsnorm / dyt / derf / none (``"none"``: no norm anywhere, final norm included, as in Noci
            et al.'s unnormalised shaped Transformer; not with ``norm_position="post"``, where the norm is the only
            thing after the residual add).
        norm_position: ``"pre"`` (norm inside the branch), ``"post"`` (norm after the residual add) or ``"none"``.
        norm_eps: the norms' ε.
        norm_alpha: DyT/Derf's initial α.
        norm_alpha_attn: α of the attention sub-layers' norms (cross-attention included); None = ``norm_alpha``.
        norm_alpha_ffn: α of the FFN sub-layers' norms; None = ``norm_alpha``.
        norm_alpha_final: α of the final norm(s), as Alekseev App. F distinguishes the final normalisation; None =
            ``norm_alpha`` (:meth:`alpha_at`).
        final_norm: normalise the last layer's output (None = True for pre-norm, else False).
        tie_head: tie the LM head to the token embedding (token input only; a patch model's classifier is its own);
            False gives the head its own matrix.
        head_scale: the factor on the head's input (None = the init scheme's choice: 1/√d for DSLM, Sec. 4.1,
            else 1).
        embed_scale: multiplies the token embedding's output (not the table a tied head reads): Gemma's √d.
        qk_norm: RMS-normalise every self-attention's query and key heads (ε = ``norm_eps``, each with a gain of 1
            at initialisation: Qwen3, OLMo-2).
        rotary_fraction: the part of each head that is rotated, in (0, 1] (GPT-NeoX's ``rotary_pct``;
            :mod:`sigprop.components.query_key`).
        parallel_block: compute the attention and the FFN branch from the same input and add both to it,
            x ← x + Attn(Norm x) + FFN(Norm x) (GPT-J, GPT-NeoX, PaLM: :mod:`sigprop.components.parallel`); Pre-LN
            decoders and encoders only.
        head_transform: BERT's masked-LM head transform before the head: a d × d matrix (role ``transform``) with a
            zero bias, the activation (relu or gelu) and a LayerNorm (ε = ``norm_eps``); token input only
            (:mod:`sigprop.components.head_transform`).
        pool: how a patch model's classifier reads the last layer: the mean over its tokens (``"mean"``, App. H) or
            a learned [CLS] token prepended to the patches (``"cls"``: Hugging Face's
            ``ViTForImageClassification``; its ``seq_len`` is then the patches + 1).
        init: the init scheme, a name of :data:`sigprop.model.init.SCHEMES` (:func:`sigprop.plan_for`).
        initializer_range: the standard deviation of every matrix and table under ``init="bert"`` (Hugging Face's
            field of that name; 0.02 in GPT-2, BERT and Llama).
        beta_k: k of DSLM-family residual scales β² = k/N^α, λ² = 1 − β² (Sec. 3.5, App. G).
        beta_alpha: α of the same.
        lam: overrides every block's λ.
        beta: overrides every block's β.
        learnable_beta: make β a parameter.
        qk_gain: multiplies the Q and K standard deviations (Sec. 3.3's "2× Xavier" is ``qk_gain=2``).
        sigma_ov: σ_OV of ``init="alekseev"`` (Alekseev 2026, Sec. 2.1, App. A): W_O, W_V with std
            √(``sigma_ov``/d) each (σ_O = σ_V = √σ_OV); Q/K std 0.02, embeddings and head std 0.02. The default
            0.31 is the paper's stated value for its ViT (App. A: timm's std 0.02 at d = 768 gives
            σ_OV = 0.02²·d ≈ 0.31), a fixed number, not recomputed from ``d_model`` (timm's std-0.02 values at
            another width: :func:`sigprop.model.vit.timm_sigmas`). Read by ``init="alekseev"`` only, as is
            ``sigma_21``.
        sigma_21: σ_21 of ``init="alekseev"``: W_1 with std √(``sigma_21``/d) and W_2 with std
            √(``sigma_21``/d_ff) (σ_1 = σ_2 = √σ_21); the default 0.61 = 2·0.02²·d at d = 768 (App. A).
        v_init: ``"scheme"``, or ``"noci"``: σ²_V = 1/fan_out (per head), the initialisation of Noci et al. 2022
            that App. F blames for rank collapse.
        input_corr: the token correlation at the first layer's input that DSLM's correlation schedule starts from
            (None: App. A.1's expectation for Zipf tokens after the embedding dropout); a DSLM patch model needs
            it, e.g. 0.46 for ViT on ImageNet, App. H (:func:`sigprop.theory.boundaries.patch_input_correlation`
            computes it from images, and the command line from its batch).
        seq_len: the sequence length that predictions assume (and the data default).
        mask_prob: the masked-LM corruption rate, in (0, 1).
        attention: ``"standard"``; ``"shaped"`` replaces every self-attention by shaped attention
            A = γ₁I + Softmax(QKᵀ/τ) − γ₂W (Noci et al. 2023, Eq. 11, App. D; W the uniform attention over each
            query's visible keys, Sec. 4.2, so a causal decoder works too; cross-attention stays standard; no
            attention dropout: ``attn_dropout``, or ``dropout`` when that is None, must be 0);
            ``"value_skipinit"`` (He et al. 2023) replaces every self-attention's A by α·I + β·A, α and β
            learnable per head, 1 and 0 at initialisation (:mod:`sigprop.components.value_skipinit`).
        shaped_tau0: τ = ``shaped_tau0``·√(d·d_head) of shaped attention (Eqs. 9, 33).
        shaped_gamma1: γ₁ (App. D initialises it at 1).
        shaped_gamma2: γ₂ (App. D initialises it at 1).
        shaped_mode: applies to γ₁, γ₂ and s₋ alike (App. D): ``"fixed"`` (constants), ``"learn"`` (parameters) or
            ``"recover"`` (annealed linearly to 0 over ``shaped_anneal_steps`` optimiser steps: call
            :func:`sigprop.model.shaped.anneal_shaped` once per step).
        shaped_anneal_steps: the steps of ``shaped_mode="recover"``, required then and only then.
        shaped_c_plus: c₊ of ``activation="shaped_relu"``, the shaped ReLU s₊max(x,0) + s₋min(x,0),
            s± = 1 + c±/√d (Eq. 4; default 0).
        shaped_c_minus: c₋ of the same (default −1: App. D's s₋ = 1 − 1/√n).
        shaped_normalize: multiply the shaped ReLU by √c, c = 2/(s₊² + s₋²) (Eq. 4's normalising constant).
        shaped_gamma: the residual branch's γ of ``init="shaped"``: λ = √(1 − γ²) (Sec. 2, Thm. 4.2); its default
            1/√8 is Fig. 1's (App. D's runs use 0.05–0.2). ``init="shaped"`` is meant with
            ``norm_position="none"`` (the paper's unnormalised architecture).

    Raises:
        ValueError: a field outside its range or choices (the message names it), or fields that contradict each
            other (``seq_len`` > ``max_len``, heads that do not divide the width, a patch size that does not divide
            the image, shaped attention with attention dropout, ...).

    Example:
        >>> import sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> config.d_head, config.ffn_width, config.total_layers
        (8, 64, 2)
        >>> config.replace(init="dslm").init, config.init  # frozen: replace() gives a validated copy
        ('dslm', 'xavier')
        >>> config.replace(dropout=0.95)
        Traceback (most recent call last):
        ...
        ValueError: dropout must be in [0.0, 0.9] (got 0.95)
    """

    arch: Arch = "encoder"
    input: Input = "tokens"
    vocab_size: int = 8192
    max_len: int = 512
    n_segments: int = 0
    image_size: int = 32
    patch_size: int = 4
    channels: int = 1
    n_classes: int = 10
    n_layers: int = 12
    n_decoder_layers: int | None = None
    d_model: int = 256
    n_heads: int = 4
    n_kv_heads: int | None = None
    head_dim: int | None = None
    position: Position = "learned"
    rope_theta: float = 10000.0
    d_ff: int | None = None
    activation: str = "relu"
    dropout: float = 0.1
    attn_dropout: float | None = None
    embed_dropout: float | None = None
    norm: str = "layernorm"
    norm_position: NormPosition = "pre"
    norm_eps: float = 1e-5
    norm_alpha: float = 0.5
    norm_alpha_attn: float | None = None
    norm_alpha_ffn: float | None = None
    norm_alpha_final: float | None = None
    final_norm: bool | None = None
    tie_head: bool = True
    head_scale: float | None = None
    embed_scale: float = 1.0
    qk_norm: bool = False
    rotary_fraction: float = 1.0
    parallel_block: bool = False
    head_transform: bool = False
    pool: Pool = "mean"
    init: str = "xavier"
    initializer_range: float = 0.02
    beta_k: float = 2.0
    beta_alpha: float = 1.0
    lam: float | None = None
    beta: float | None = None
    learnable_beta: bool = False
    qk_gain: float = 1.0
    sigma_ov: float = 0.31
    sigma_21: float = 0.61
    v_init: VInit = "scheme"
    input_corr: float | None = None
    seq_len: int = 128
    mask_prob: float = 0.15
    attention: str = "standard"
    shaped_tau0: float = 1.0
    shaped_gamma1: float = 1.0
    shaped_gamma2: float = 1.0
    shaped_mode: str = "fixed"
    shaped_anneal_steps: int | None = None
    shaped_c_plus: float = 0.0
    shaped_c_minus: float = -1.0
    shaped_normalize: bool = True
    shaped_gamma: float = 8.0**-0.5

    def __post_init__(self) -> None:
        def choice(name: str, allowed: Collection[str]) -> None:
            check_choice(self, name, allowed)

        def integer(name: str, lo: int, optional: bool = False) -> None:
            check_integer(self, name, lo, optional)

        def number(name: str, lo: float | None = None, hi: float | None = MAX_NUMBER, lo_open: bool = False,
                   hi_open: bool = False, optional: bool = False) -> None:
            check_number(self, name, lo, hi, lo_open, hi_open, optional)

        def boolean(name: str, optional: bool = False) -> None:
            check_boolean(self, name, optional)

        choice("arch", ARCHS)
        choice("input", INPUTS)
        choice("pool", POOLS)
        choice("activation", ACTIVATIONS)
        choice("norm", NORMS)
        choice("attention", ATTENTIONS)
        choice("shaped_mode", SHAPED_MODES)
        choice("norm_position", NORM_POSITIONS)
        choice("v_init", V_INITS)
        choice("position", POSITIONS)
        choice("init", SCHEME_NAMES)
        for name in ("vocab_size", "max_len", "n_layers", "d_model", "n_heads", "seq_len", "image_size",
                     "patch_size", "channels", "n_classes"):
            integer(name, 1)
        integer("n_segments", 0)
        integer("n_decoder_layers", 1, optional=True)
        integer("d_ff", 1, optional=True)
        integer("n_kv_heads", 1, optional=True)
        integer("head_dim", 1, optional=True)
        number("rope_theta", 1.0, None, lo_open=True)  # a rotary base only sets frequencies (Qwen2.5-1M's is 1e7)
        number("initializer_range", 0.0, lo_open=True)
        number("dropout", 0.0, MAX_DROPOUT)
        number("attn_dropout", 0.0, MAX_DROPOUT, optional=True)
        number("embed_dropout", 0.0, MAX_DROPOUT, optional=True)
        number("norm_eps", 0.0)
        number("norm_alpha", 0.0, lo_open=True)
        for name in ("norm_alpha_attn", "norm_alpha_ffn", "norm_alpha_final"):
            number(name, 0.0, lo_open=True, optional=True)
        number("head_scale", 0.0, lo_open=True, optional=True)
        number("embed_scale", 0.0, lo_open=True)
        number("rotary_fraction", 0.0, 1.0, lo_open=True)
        number("beta_k", 0.0, lo_open=True)
        number("beta_alpha", 0.0)
        number("lam", 0.0, optional=True)
        number("beta", 0.0, optional=True)
        number("qk_gain", 0.0, lo_open=True)
        number("sigma_ov", 0.0, lo_open=True)
        number("sigma_21", 0.0, lo_open=True)
        number("input_corr", 0.0, 1.0, lo_open=True, optional=True)
        number("mask_prob", 0.0, 1.0, lo_open=True, hi_open=True)
        number("shaped_tau0", 0.0, lo_open=True)
        for name in ("shaped_gamma1", "shaped_gamma2", "shaped_c_plus", "shaped_c_minus"):
            number(name, -MAX_NUMBER)
        number("shaped_gamma", 0.0, 1.0, lo_open=True)
        integer("shaped_anneal_steps", 1, optional=True)
        for name in ("tie_head", "learnable_beta", "shaped_normalize", "qk_norm", "parallel_block", "head_transform"):
            boolean(name)
        boolean("final_norm", optional=True)
        if self.lam == 0.0 and self.beta == 0.0:
            raise ValueError("lam and beta are both 0: every layer's output would be zero; give one of them a "
                             "positive value")
        self._check_shaped()
        if self.norm == "none" and self.norm_position == "post":
            raise ValueError("norm='none' with norm_position='post' leaves nothing after the residual add: use "
                             "norm_position='none' (or 'pre') for an unnormalised model, or choose a norm of "
                             f"{', '.join(n for n in NORMS if n != 'none')}")
        self._check_heads()
        if self.input == "tokens" and self.seq_len > self.max_len:
            raise ValueError(f"seq_len ({self.seq_len}) must not exceed max_len ({self.max_len})")
        if self.input == "patches":
            if self.image_size % self.patch_size:
                raise ValueError(f"image_size ({self.image_size}) must be divisible by patch_size "
                                 f"({self.patch_size})")
            if self.arch != "encoder":
                raise ValueError("patch input is supported for arch='encoder' (a ViT) only")
            if self.n_segments:
                raise ValueError("n_segments applies to token input only")
        if self.arch == "encoder_decoder" and self.n_segments:
            raise ValueError("n_segments is supported for arch='encoder' and 'decoder' only")
        if self.pool == "cls" and self.input != "patches":
            raise ValueError("pool='cls' applies to patch input (a ViT) only")
        if self.input == "patches" and self.seq_len != self.n_image_tokens:
            cls = " plus the [CLS] token" if self.pool == "cls" else ""
            raise ValueError(f"for patch input seq_len must equal the number of patches{cls} "
                             f"({self.n_image_tokens} = ({self.image_size}/{self.patch_size})²"
                             f"{' + 1' if cls else ''}); got {self.seq_len}")
        beta2 = self.dslm_beta2
        if self.scheme.bounds_depth and beta2 > 1.0 and self.lam is None:
            raise ValueError(f"beta_k / N**beta_alpha = {beta2:.3g} > 1 gives λ² = 1 − β² < 0 "
                             f"(N = {self.total_layers} layers): lower beta_k or raise beta_alpha")

    def _check_heads(self) -> None:
        """Head widths, grouped-query heads and rotary embedding (Llama-style fields)."""
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}), or set head_dim")
        if self.n_kv_heads is not None and self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        special = [name for name, on in (("n_kv_heads", self.n_kv_heads not in (None, self.n_heads)),
                                         ("position='rope'", self.position == "rope"), ("qk_norm", self.qk_norm))
                   if on]
        if special and self.attention != "standard":
            raise ValueError(f"{' and '.join(special)} apply to standard attention only (got attention="
                             f"{self.attention!r})")
        if self.position != "learned" and self.input == "patches":
            raise ValueError("a patch model (ViT) has its learned position table: position must be 'learned'")
        if self.position == "rope":
            if self.arch == "encoder_decoder":
                raise ValueError("position='rope' is supported for arch='encoder' and 'decoder'")
            if self.d_head % 2:
                raise ValueError(f"position='rope' needs an even head width (d_head = {self.d_head})")
            rotated = int(self.d_head * self.rotary_fraction)
            if rotated < 2 or rotated % 2:
                raise ValueError(f"rotary_fraction = {self.rotary_fraction:g} rotates {rotated} of a head's "
                                 f"{self.d_head} coordinates: it needs an even number >= 2")
        elif self.rotary_fraction != 1.0:
            raise ValueError("rotary_fraction applies to position='rope' only")
        if self.head_transform and (self.input != "tokens" or self.activation not in ("relu", "gelu")):
            raise ValueError("head_transform (BERT's masked-LM head transform) needs token input and a relu or gelu "
                             f"activation (got input={self.input!r}, activation={self.activation!r})")
        if self.parallel_block and (self.norm_position != "pre" or self.arch == "encoder_decoder"):
            raise ValueError("parallel_block is supported for norm_position='pre' in an encoder or a decoder (GPT-J, "
                             f"GPT-NeoX; got norm_position={self.norm_position!r}, arch={self.arch!r})")
        # fields that would otherwise be accepted and ignored: the model built would not be the one asked for
        if self.n_decoder_layers is not None and self.arch != "encoder_decoder":
            raise ValueError(f"n_decoder_layers applies to arch='encoder_decoder' only (got arch={self.arch!r})")
        if self.embed_scale != 1.0 and self.input != "tokens":
            raise ValueError("embed_scale scales the token embedding: it applies to input='tokens' only (got "
                             f"input={self.input!r})")
        if self.final_norm and self.norm_position == "none":
            raise ValueError("final_norm=True needs norms: norm_position='none' has none, final norm included")

    def _check_shaped(self) -> None:
        """The shaped-Transformer fields' cross-field rules (Noci et al. App. D)."""
        if self.shaped_mode == "recover" and self.shaped_anneal_steps is None:
            raise ValueError("shaped_mode='recover' needs shaped_anneal_steps (an integer >= 1: the optimiser steps "
                             "over which γ₁, γ₂ and s₋ decay to 0, App. D uses 4000)")
        if self.shaped_mode != "recover" and self.shaped_anneal_steps is not None:
            raise ValueError(f"shaped_anneal_steps applies to shaped_mode='recover' only (got shaped_mode="
                             f"{self.shaped_mode!r})")
        if self.attention == "shaped" and self.p_attn > 0.0:
            src = "attn_dropout" if self.attn_dropout is not None else "dropout (attn_dropout is None)"
            raise ValueError(f"attention='shaped' has no attention dropout: set attn_dropout=0.0 (got {self.p_attn} "
                             f"from {src})")
        if self.activation == "shaped_relu":
            root = self.d_model**0.5
            if 1.0 + self.shaped_c_plus / root == 0.0 and 1.0 + self.shaped_c_minus / root == 0.0:
                raise ValueError(f"shaped_c_plus and shaped_c_minus make both shaped-ReLU slopes 1 + c±/√d_model "
                                 f"zero at d_model={self.d_model}")

    # derived values -------------------------------------------------------------------------------------------
    @property
    def ffn_width(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def kv_heads(self) -> int:
        """Key/value heads (``n_kv_heads``, or ``n_heads`` where that is None)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def rope(self) -> float | None:
        """The rotary base the self-attentions use (None without RoPE)."""
        return self.rope_theta if self.position == "rope" else None

    @property
    def qk_norm_eps(self) -> float | None:
        """The ε of the self-attentions' QK-norm (None without one)."""
        return self.norm_eps if self.qk_norm else None

    @property
    def position_table(self) -> int:
        """Rows of the learned position table (0 without one)."""
        return self.max_len if self.position == "learned" else 0

    @property
    def p_attn(self) -> float:
        return self.dropout if self.attn_dropout is None else self.attn_dropout

    @property
    def dslm_beta2(self) -> float:
        """DeepScaleLM's residual branch scale β² = k/N^α (Kedia et al. Sec. 3.5, App. G; N: all layers); at 1 or
        more its λ² = 1 − β² leaves no skip path."""
        return self.beta_k / self.total_layers**self.beta_alpha

    @property
    def p_embed(self) -> float:
        """The dropout after the embeddings: ``embed_dropout``, or ``dropout`` where that is None."""
        return self.dropout if self.embed_dropout is None else self.embed_dropout

    def alpha_at(self, position: str) -> float:
        """DyT/Derf's initial α at ``position`` ("attn", "cross", "ffn" or "final"): the position's own field, or
        ``norm_alpha`` where that is None (cross-attention norms use ``norm_alpha_attn``)."""
        key = {"attn": "norm_alpha_attn", "cross": "norm_alpha_attn", "ffn": "norm_alpha_ffn",
               "final": "norm_alpha_final"}.get(position)
        if key is None:
            raise ValueError(f"position must be one of attn, cross, ffn, final (got {position!r})")
        v = getattr(self, key)
        return float(self.norm_alpha if v is None else v)

    @property
    def has_final_norm(self) -> bool:
        if self.norm_position == "none" or self.norm == "none":
            return False
        return self.norm_position == "pre" if self.final_norm is None else self.final_norm

    @property
    def n_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def n_image_tokens(self) -> int:
        """A patch model's tokens: its patches, and the [CLS] token with ``pool="cls"``."""
        return self.n_patches + (1 if self.pool == "cls" else 0)

    @property
    def n_embedding_types(self) -> int:
        """Number of embedding tables summed at the input (token/patch, position, segment)."""
        return 1 + (1 if self.position == "learned" or self.input == "patches" else 0) + (1 if self.n_segments else 0)

    @property
    def scheme(self) -> InitScheme:
        """What ``init`` is (:mod:`sigprop.model.init_schemes`): its family, what it reads, what it was made for."""
        return scheme_info(self.init)

    @property
    def total_layers(self) -> int:
        """N in the residual scalings: all layers of the model (encoder + decoder)."""
        return self.n_layers + (self.n_decoder_layers or self.n_layers if self.arch == "encoder_decoder" else 0)


def config_from_dict(data: dict) -> TransformerConfig:
    """Build a config from a plain dict (e.g. a JSON file), rejecting unknown keys by name."""
    return dataclass_from_dict(TransformerConfig, data, "config")


def apply_overrides(config: TransformerConfig, overrides: list[str] | tuple[str, ...]) -> TransformerConfig:
    """Apply ``key=value`` strings (the CLI's ``--set``), parsing each value by its field's type
    (:func:`sigprop.core.overrides.apply_field_overrides`)."""
    return apply_field_overrides(config, overrides, "--set")
