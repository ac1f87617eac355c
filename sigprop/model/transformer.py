"""The Transformer: embeddings → layers → final norm → (scaled) head, built only from sigprop's components
(Kedia et al. Sec. 2, App. B, H), initialised from its config's init plan (:mod:`sigprop.model.init`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import nn

from ..components.dropout import Dropout
from ..components.embedding import Embedding
from ..components.factory import make_norm
from ..components.head_transform import HeadTransform
from ..components.patch import PatchEmbedding
from .batch import Batch
from .config import TransformerConfig
from .init import InitPlan, make_plan
from .layer import TransformerLayer, norm_kwargs

__all__ = ["plan_for", "Transformer", "Stack", "seeded_model", "DROPOUT_SEED_OFFSET"]

@functools.lru_cache(maxsize=64)
def plan_for(config: TransformerConfig) -> InitPlan:
    """The init plan a model of ``config`` is built with.

    Its scheme's plan (:func:`~sigprop.model.init.make_plan`); for ``init="auto"`` DSLM's with every residual
    branch's output projection (W_O, W_2; a cross-attention's β) calibrated by the theory so that each branch's
    output second moment equals its skip input's (:mod:`sigprop.model.auto_init`: one forward walk of the theory's
    model with the components' rules; its cost at 192 layers is the "calibration" column of the auto-init page,
    docs/results/auto-init.md). Cached per config (configs are frozen and hashable).

    Args:
        config: a :class:`~sigprop.model.config.TransformerConfig`.

    Returns:
        The :class:`~sigprop.model.init.InitPlan`; for ``init="auto"`` its ``notes`` hold ``"calibrated": True``
        and each site's factors (``"attn_factor"``, ``"cross_factor"``, ``"ffn_factor"``).

    Raises:
        ValueError: the rules cannot walk the config (``init="auto"`` only).

    Example:
        >>> import sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8,
        ...                                    activation="swiglu", init="auto")
        >>> plan = sigprop.plan_for(config)
        >>> plan.scheme, plan.notes["calibrated"], len(plan.notes["ffn_factor"])
        ('auto', True, 2)
        >>> sigprop.Transformer(config).plan is plan  # every model of the config is built with it
        True
    """
    plan = make_plan(config)
    if not config.scheme.calibrated:
        return plan
    from .auto_init import branch_factors

    factors = branch_factors(Transformer(_calibration_config(config), plan=plan, sample=False))
    if config.parallel_block:  # one branch, Attn + FFN, whose site is "attn": both its last matrices carry the factor
        factors["ffn"] = factors["attn"]
    stds = dict(plan.stds)
    stds["o"] = plan.stds["o"] * np.sqrt(factors["attn"])
    stds["w2"] = plan.stds["w2"] * np.sqrt(factors["ffn"])
    beta = {**plan.beta, "cross": plan.beta["cross"] * np.sqrt(factors["cross"])}
    notes = {**plan.notes, "calibrated": True,
             **{f"{site}_factor": factors[site].tolist() for site in ("attn", "cross", "ffn")}}
    return InitPlan("auto", stds, plan.lam, beta, plan.learnable_beta, plan.head_scale, notes)


def _calibration_config(config: TransformerConfig) -> TransformerConfig:
    """The config the calibration walks: rotary positions off (they leave the scores' variance unchanged; the
    closed-form attention rule then applies: :mod:`sigprop.model.auto_init`)."""
    return config.replace(position="none", rotary_fraction=1.0) if config.position == "rope" else config


_Layers = Sequence[TransformerLayer]

#: The global RNG (which dropout draws from) is seeded with this plus the model's seed by :func:`seeded_model`.
DROPOUT_SEED_OFFSET = 10_000


@dataclass(frozen=True)
class Stack:
    """One stack of layers of a :class:`Transformer`, as its forward pass and its theory both walk it: the embedding
    output after ``dropout`` (the stack's input site ``input_site``) goes through ``layers`` in order. An encoder
    whose output the next stack's cross-attentions read has ``memory=True``, and that output goes through
    ``memory_norm`` (None: read as it is) first. ``name``: "" for the one stack of an encoder or a decoder,
    "encoder" / "decoder" in an encoder–decoder."""

    name: str
    layers: Sequence[TransformerLayer]  # an nn.ModuleList of them
    dropout: nn.Module
    input_site: tuple[int, str]
    memory: bool = False
    memory_norm: nn.Module | None = None


class Transformer(nn.Module):
    """A transformer of ``config``: embeddings → layers → final norm → (scaled) head, built from sigprop's components.

    The model of Kedia et al. Sec. 2, App. B (App. H for patch input), every weight sampled from ``plan``
    (:class:`~sigprop.model.init.InitPlan`, default :func:`plan_for` of the config) in one fixed traversal, so a
    seed gives the same model everywhere. Its module tree is also its theory's: :func:`sigprop.predict` walks the
    same blocks with their moment rules (ARCHITECTURE.md, "The one idea").

    * ``forward(inputs, segment_ids=None, padding_mask=None, decoder_inputs=None, decoder_padding_mask=None)``
      returns logits: (batch, L, vocab) for token models (of the decoder for an encoder–decoder), (batch,
      n_classes) for a patch model (mean-pooled or read at [CLS]). ``padding_mask`` (batch, L) is True at real
      tokens.
    * ``loss(batch)``: the training objective on a batch dict (:func:`sigprop.make_batch`;
      :mod:`sigprop.model.objective`).
    * ``sites()``: the (layer, site, module) triples that :mod:`sigprop.measurement` hooks and :func:`sigprop.predict`
      mirrors; ``stacks()``: its top level (one stack, or an encoder–decoder's two).

    Args:
        config: the :class:`~sigprop.model.config.TransformerConfig`.
        plan: the init plan to sample from (default: ``plan_for(config)``, the config's scheme, calibrated for
            ``init="auto"``).
        generator: the weights' random stream (default: torch's global one).
        device: where the weights are made (default: the CPU).
        sample: False leaves the weight matrices on the meta device and only sets the declared values the rules
            read (the theory's model: nothing is drawn).

    Attributes:
        config: the configuration.
        plan: the :class:`~sigprop.model.init.InitPlan` the weights were sampled from.
        embed: the token (:class:`~sigprop.components.embedding.Embedding`) or patch embedding.
        layers: the (encoder) stack's layers; ``dec_layers``: an encoder–decoder's decoder layers.
        final_norm: the norm after the last layer, or None.
        head: the LM head or classifier (tied to ``embed.token.weight`` when ``config.tie_head``).
        head_scale: the buffer that multiplies the head's input (the plan's head scale).

    Raises:
        TypeError: ``config`` is not a ``TransformerConfig``.

    Example:
        >>> import torch, sigprop
        >>> config = sigprop.TransformerConfig(n_layers=2, d_model=16, n_heads=2, vocab_size=64, seq_len=8)
        >>> model = sigprop.Transformer(config, generator=torch.Generator().manual_seed(0))
        >>> model(torch.randint(5, 64, (3, 8))).shape
        torch.Size([3, 8, 64])
        >>> [(layer, site) for layer, site, _ in model.sites()][:4]
        [(-1, 'input'), (0, 'attn'), (0, 'ffn'), (0, 'layer')]
    """

    embed: Embedding | PatchEmbedding
    head_scale: torch.Tensor

    def __init__(self, config: TransformerConfig, plan: InitPlan | None = None,
                 generator: torch.Generator | None = None, device: torch.device | str | None = None,
                 sample: bool = True) -> None:
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"config must be a TransformerConfig (got {type(config).__name__})")
        self.config = config
        self.plan = plan if plan is not None else plan_for(config)
        # Modules are built on the meta device (free), then materialised once and initialised only by the plan:
        # no weight is sampled twice. ``sample=False`` is the theory's model: its weight matrices stay on the meta
        # device (the rules read the plan's declared values, never a weight), the small tensors the rules do read
        # (residual scales, DyT/Derf parameters, declared standard deviations) are materialised.
        with torch.device("meta"):
            self._build(config)
        if sample:
            self.to_empty(device=device or "cpu")
        else:
            _materialise_small(self, device or "cpu")
        if config.input == "tokens" and config.tie_head:
            self.head.weight = cast(Embedding, self.embed).token.weight  # materialising unties shared parameters
        self.plan.apply(self, generator, sample=sample)

    def _build(self, c: TransformerConfig) -> None:
        if c.input == "tokens":
            self.embed = Embedding(c.vocab_size, c.d_model, max_len=c.position_table, n_segments=c.n_segments,
                                   token_scale=c.embed_scale)
        else:
            self.embed = PatchEmbedding(c.image_size, c.patch_size, c.channels, c.d_model, cls_token=c.pool == "cls")
        self.embed_drop = Dropout(c.p_embed)
        learn = self.plan.learnable_beta
        causal = c.arch == "decoder"
        self.layers = nn.ModuleList(TransformerLayer(c, i, causal=causal, learnable_beta=learn)
                                    for i in range(c.n_layers))
        if c.arch == "encoder_decoder":
            n_dec = c.n_decoder_layers or c.n_layers
            self.dec_embed_drop = Dropout(c.p_embed)
            self.enc_norm = make_norm(c.norm, c.d_model, **norm_kwargs(c, "final")) if c.has_final_norm else None
            self.dec_layers = nn.ModuleList(
                TransformerLayer(c, c.n_layers + j, causal=True, cross=True, learnable_beta=learn)
                for j in range(n_dec))
        self.final_norm = make_norm(c.norm, c.d_model, **norm_kwargs(c, "final")) if c.has_final_norm else None
        self.head_transform = HeadTransform(c.d_model, c.activation, c.norm_eps) if c.head_transform else None
        out = c.vocab_size if c.input == "tokens" else c.n_classes
        self.head = nn.Linear(c.d_model, out, bias=False)
        self.register_buffer("head_scale", torch.tensor(float(self.plan.head_scale)))

    # structure ------------------------------------------------------------------------------------------------
    def stacks(self) -> list[Stack]:
        """The model's top level, once for the forward pass, the sites and the theory: one stack, or an
        encoder–decoder's encoder (its output, after ``enc_norm``, is the memory) and decoder."""
        if self.config.arch != "encoder_decoder":
            return [Stack("", cast(_Layers, self.layers), self.embed_drop, (-1, "input"))]
        return [Stack("encoder", cast(_Layers, self.layers), self.embed_drop, (-1, "input"), memory=True,
                      memory_norm=self.enc_norm),
                Stack("decoder", cast(_Layers, self.dec_layers), self.dec_embed_drop,
                      (self.config.n_layers, "dec_input"))]

    def all_layers(self) -> list[TransformerLayer]:
        return [layer for stack in self.stacks() for layer in stack.layers]

    def norms(self) -> list[tuple[int | None, str, nn.Module, str, nn.Module]]:
        """(layer index, position, parent, attribute name, module) of every norm: the layers'
        norms (:meth:`TransformerLayer.norms`, position "attn" / "cross" / "ffn"), then an encoder–decoder's
        encoder-output norm and the final norm (layer None, position "final"; Alekseev App. F's final
        normalisation). ``setattr(parent, name, new)`` replaces one."""
        out: list[tuple[int | None, str, nn.Module, str, nn.Module]] = [
            (layer.index, pos, parent, name, m) for layer in self.all_layers() for pos, parent, name,
            m in layer.norms()]
        for name in ("enc_norm", "final_norm"):
            m = getattr(self, name, None)
            if m is not None:
                out.append((None, "final", self, name, m))
        return out

    def sites(self) -> list[tuple[int, str, nn.Module]]:
        """(layer, site, module) for every measured tensor, stack by stack: the stack's input (layer −1 "input", the
        embedding output after dropout; an encoder–decoder's decoder input is (n_layers, "dec_input")), then per
        layer the branch outputs "attn" ["cross"] "ffn" and the layer output "layer"."""
        out = []
        for stack in self.stacks():
            out.append((*stack.input_site, stack.dropout))
            for layer in stack.layers:
                out.extend((layer.index, name, branch) for name, branch in layer.branches())
                out.append((layer.index, "layer", layer))
        return out

    # forward --------------------------------------------------------------------------------------------------
    def _embed(self, inputs: torch.Tensor, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        if self.config.input == "tokens":
            return self.embed(inputs, segment_ids) if self.config.n_segments else self.embed(inputs)
        return self.embed(inputs)

    def hidden_states(self, inputs: torch.Tensor, segment_ids: torch.Tensor | None = None,
                      padding_mask: torch.Tensor | None = None, decoder_inputs: torch.Tensor | None = None,
                      decoder_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The last layer's output (before the final norm), stack by stack (:meth:`stacks`): each stack embeds its
        own inputs; a decoder's layers read the encoder's memory."""
        stacks = self.stacks()
        if len(stacks) > 1 and decoder_inputs is None:
            raise ValueError("an encoder-decoder needs decoder_inputs (the target token ids)")
        memory, feeds = None, [(inputs, segment_ids, padding_mask), (decoder_inputs, None, decoder_padding_mask)]
        for stack, (ids, segments, mask) in zip(stacks, feeds, strict=False):
            x = stack.dropout(self._embed(cast(torch.Tensor, ids), segments))  # a decoder's checked above
            ctx: dict[str, torch.Tensor | None] = {} if mask is None else {"key_padding_mask": mask}
            if memory is not None:
                ctx.update(memory=memory, memory_padding_mask=padding_mask)
            for layer in stack.layers:
                x = layer(x, **ctx)
            if stack.memory:
                memory = stack.memory_norm(x) if stack.memory_norm is not None else x
        return x

    def forward(self, inputs: torch.Tensor, segment_ids: torch.Tensor | None = None,
                padding_mask: torch.Tensor | None = None, decoder_inputs: torch.Tensor | None = None,
                decoder_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.hidden_states(inputs, segment_ids, padding_mask, decoder_inputs, decoder_padding_mask)
        if self.final_norm is not None:
            h = self.final_norm(h)
        if self.head_transform is not None:
            h = self.head_transform(h)
        h = h * self.head_scale
        if self.config.input == "patches":  # the classifier reads the tokens' mean or the [CLS] token
            h = h[..., 0, :] if self.config.pool == "cls" else h.mean(dim=-2)
        return self.head(h)

    def loss(self, batch: Batch | dict) -> torch.Tensor:
        """Cross-entropy of the model's objective on ``batch``, a :class:`~sigprop.model.batch.Batch` (or sigprop's
        batch dict; see :func:`sigprop.model.objective.make_batch`)."""
        from .objective import objective_loss

        return objective_loss(self, batch)


def seeded_model(config: TransformerConfig, seed: int, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None, masks: bool = True) -> Transformer:
    """Model number ``seed`` of ``config``, as every measurement in sigprop draws it: its weights drawn on the CPU
    from ``torch.Generator().manual_seed(seed)`` (so every device gets the same model; a CPU generator cannot fill a
    GPU tensor), then moved to ``device`` / ``dtype``, in training mode; with ``masks`` the global RNG, which
    dropout draws from, is seeded with :data:`DROPOUT_SEED_OFFSET` + ``seed`` (its dropout masks are its own)."""
    model = Transformer(config, generator=torch.Generator().manual_seed(int(seed)))
    if device is not None or dtype is not None:
        model = model.to(device=device, dtype=dtype)
    model.train()
    if masks:
        torch.manual_seed(DROPOUT_SEED_OFFSET + int(seed))
    return model


def _materialise_small(model: nn.Module, device: torch.device | str | None) -> None:
    """Materialise every buffer and every parameter of at most one dimension (uninitialised: the plan sets them),
    leaving weight matrices and tables on the meta device."""
    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            if p.dim() <= 1:
                setattr(module, name, nn.Parameter(torch.empty_like(p, device=device), requires_grad=p.requires_grad))
        for name, b in list(module.named_buffers(recurse=False)):
            module.register_buffer(name, torch.empty_like(b, device=device),
                                   persistent=name not in module._non_persistent_buffers_set)
