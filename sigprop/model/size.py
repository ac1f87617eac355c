"""How much memory a model needs, estimated before anything is built: a configuration of a billion layers or a width
of 100,000 is refused with a message instead of being killed for memory after a long silence.

The estimates are deliberately simple and stated here: parameters 4 bytes each (float32); one measured forward and
backward holds, per layer and token, about 10·d + 2·d_ff floats of activations (norm, Q, K, V, attention output,
projection, dropout masks, the FFN's hidden layer twice), plus 2·H·L² per sequence for the attention probabilities
and their dropout mask, times 1.5 for what the estimate leaves out (a 192-layer preset, d = 256, 4 × 128 tokens:
estimated 3.9 GB, measured peak 4.8 GB); the theory's model keeps its weight matrices on the meta device and costs
about 40 kB of Python objects per layer, plus for a token-resolved sweep three B × L × L float64 matrices per layer,
and one layer's attention draws at a time: the sampled rule's (per head, float64 inputs of L × d and Q, K weights of
d × d_head), or where those would exceed
:data:`~sigprop.components.attention.SAMPLED_MAX_NUMBERS` the bounded rule's (one head of L × 2·d_head float32
coordinates with its autograd graph: :func:`~sigprop.components.attention_bounded.bounded_numbers`). The estimate
against the measured peak of ``sigprop predict`` at production sizes: docs/results/scale.md.

The token-resolved sweep is the default for a batch only where it is cheap (:func:`resolved_by_default`): its Gram
matrices, kept for every layer, within :data:`RESOLVED_DEFAULT_BYTES`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..components.attention import SAMPLED_MAX_NUMBERS, sampled_numbers
from ..components.attention_bounded import bounded_numbers
from ..components.draws import DEFAULT_HEADS
from ..components.factory import GATED_ACTIVATIONS

if TYPE_CHECKING:
    from .config import TransformerConfig

__all__ = ["parameter_count", "measure_bytes", "theory_bytes", "available_bytes", "check_fits", "gram_bytes",
           "resolved_by_default", "RESOLVED_DEFAULT_BYTES"]

#: What the activation estimate leaves out, as a factor (module docstring).
SLACK = 1.5
#: Python objects of the theory's model, per layer (measured with tracemalloc: ~36 kB at any width).
THEORY_LAYER_BYTES = 40_000
#: Largest total of Gram matrices (bytes, every layer) for which a batch's prediction is token-resolved by default:
#: 1 GB, thirty times what the presets' batches need (decoder-preln: 0.30 GB; llama-preln: 0.08 GB).
RESOLVED_DEFAULT_BYTES = 1_000_000_000


#: Parameters of one norm of width d, by ``TransformerConfig.norm``: (per unit, per norm) (DyT's α; Derf's α and
#: shift are scalars).
_NORM_PARAMETERS = {"layernorm": (2, 0), "rmsnorm": (1, 0), "dyt": (2, 1), "derf": (2, 2), "none": (0, 0)}


def parameter_count(config: TransformerConfig) -> int:
    """The number of parameters of a :class:`~sigprop.model.Transformer` of ``config``, counted from the config alone
    (nothing is built, whatever its size): embeddings, every layer's attention (with QK-norm gains), cross-attention,
    FFN, norms and learnable residual scales, the final norms, BERT's head transform, the head when untied.

    Args:
        config: the model's configuration.

    Returns:
        Its number of parameters (a tied head's shared with the token table counted once).

    Example:
        >>> from sigprop import TransformerConfig
        >>> parameter_count(TransformerConfig(n_layers=3, d_model=32, n_heads=2, vocab_size=50, seq_len=8,
        ...                                   max_len=8))
        39168
    """
    from .init_schemes import scheme_info

    d, n_layers = config.d_model, config.total_layers
    if config.input == "tokens":
        embed = (config.vocab_size + config.position_table + config.n_segments) * d
        head = 0 if config.tie_head else config.vocab_size * d
    else:
        embed = (config.channels * config.patch_size**2 + 1 + config.n_image_tokens
                 + (1 if config.pool == "cls" else 0)) * d
        head = config.n_classes * d
    per_unit, per_norm = _NORM_PARAMETERS[config.norm]
    norm = per_unit * d + per_norm
    learns_beta = config.learnable_beta or scheme_info(config.init).learns_beta
    attention = 2 * d * config.d_head * (config.n_heads + config.kv_heads)
    if config.qk_norm:
        attention += 2 * config.d_head
    ffn = (3 if config.activation in GATED_ACTIVATIONS else 2) * d * config.ffn_width
    branch_norm = norm if config.norm_position != "none" else 0
    per_layer = attention + ffn + 2 * (branch_norm + learns_beta)
    n_decoder = n_layers - config.n_layers if config.arch == "encoder_decoder" else 0
    cross = n_decoder * (4 * d * d + branch_norm + learns_beta)
    finals = (2 if config.arch == "encoder_decoder" else 1) * norm if config.has_final_norm else 0
    transform = d * d + d + 2 * d if config.head_transform else 0
    return int(embed + head + n_layers * per_layer + cross + finals + transform)


def measure_bytes(config: TransformerConfig, batch_size: int) -> int:
    """Bytes to draw and measure one model of ``config`` on ``batch_size`` sequences (module docstring)."""
    tokens, L = batch_size * config.seq_len, config.seq_len
    per_layer = tokens * (10 * config.d_model + 2 * config.ffn_width) + 2 * batch_size * config.n_heads * L * L
    return int(4 * parameter_count(config) + SLACK * 4 * config.total_layers * per_layer)


def gram_bytes(config: TransformerConfig, batch_size: int, length: int | None = None) -> int:
    """Bytes of the token-resolved sweep's Gram matrices for a batch of ``batch_size`` sequences of ``length`` tokens
    (default: ``config.seq_len``): three B × L × L float64 matrices per layer, kept for the backward sweep."""
    L = config.seq_len if length is None else int(length)
    return int(config.total_layers * 3 * 8 * batch_size * L**2)


def resolved_by_default(config: TransformerConfig, batch_size: int, length: int | None = None) -> bool:
    """Whether a prediction on a batch of ``batch_size`` sequences of ``length`` tokens (default:
    ``config.seq_len``) is token-resolved when not told: where its Gram matrices (:func:`gram_bytes`) stay within
    :data:`RESOLVED_DEFAULT_BYTES`."""
    return gram_bytes(config, batch_size, length) <= RESOLVED_DEFAULT_BYTES


def theory_bytes(config: TransformerConfig, batch_size: int = 0, heads: int = DEFAULT_HEADS,
                 token_resolved: bool | None = None) -> int:
    """Bytes of a prediction of ``config``: the theory's model, with a batch of ``batch_size`` sequences the
    token-resolved sweep's Gram matrices (where it is the default, :func:`resolved_by_default`, or asked for with
    ``token_resolved=True``), and one layer's attention draws for ``heads`` heads: the sampled rule's (float64
    inputs and Q, K weights, twice for autograd), or the bounded rule's where the sampled one's would not fit (module
    docstring)."""
    resolved = batch_size > 0 and token_resolved is not False and (token_resolved or
                                                                   resolved_by_default(config, batch_size))
    grams = gram_bytes(config, batch_size) if resolved else 0
    L, d, e = config.seq_len, config.d_model, config.d_head
    if sampled_numbers(heads, L, d) <= SAMPLED_MAX_NUMBERS:
        draws = 2 * 8 * heads * (L * (2 * d + L) + 2 * d * e)
    else:
        draws = 8 * bounded_numbers(heads, L, d, e)
    return int(config.total_layers * THEORY_LAYER_BYTES + grams + draws)


def available_bytes() -> int | None:
    """The memory available to a new allocation (``MemAvailable`` of /proc/meminfo), or None where it is unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fits(needed: int, what: str) -> None:
    """``ValueError`` when ``needed`` bytes exceed the memory available now (nothing is checked where that is
    unknown): ``what`` names the work, e.g. "measuring a model of 1000000000 layers"."""
    have = available_bytes()
    if have is not None and needed > have:
        raise ValueError(f"{what} needs about {_gb(needed)} of memory, more than the {_gb(have)} available: "
                         "use fewer layers, a smaller width or a smaller batch")


def _gb(n: int) -> str:
    return f"{n / 1e9:.3g} GB"
