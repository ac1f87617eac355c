"""How much memory a model needs, estimated before anything is built: a configuration of a billion layers or a width
of 100,000 is refused with a message instead of being killed for memory after a long silence.

The estimates are deliberately simple and stated here: parameters 4 bytes each (float32); one measured forward and
backward holds, per layer and token, about 10·d + 2·d_ff floats of activations (norm, Q, K, V, attention output,
projection, dropout masks, the FFN's hidden layer twice), plus 2·H·L² per sequence for the attention probabilities
and their dropout mask, times 1.5 for what the estimate leaves out (a 192-layer preset, d = 256, 4 × 128 tokens:
estimated 3.9 GB, measured peak 4.8 GB); the theory's model keeps its weight matrices on the meta device and costs
about 40 kB of Python objects per layer, plus for a token-resolved sweep three B × L × L float64 matrices per layer,
and the sampled attention rule's draws (per head, float64 inputs of L × d and Q, K weights of d × d_head).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..components.factory import GATED_ACTIVATIONS

if TYPE_CHECKING:
    from .config import TransformerConfig

__all__ = ["parameter_count", "measure_bytes", "theory_bytes", "available_bytes", "check_fits"]

#: What the activation estimate leaves out, as a factor (module docstring).
SLACK = 1.5
#: Python objects of the theory's model, per layer (measured with tracemalloc: ~36 kB at any width).
THEORY_LAYER_BYTES = 40_000


def parameter_count(config: TransformerConfig) -> int:
    """The number of parameters of a :class:`~sigprop.model.Transformer` of ``config`` (embeddings, every layer's
    attention, cross-attention, FFN and norms, the head when untied)."""
    d, n_layers = config.d_model, config.total_layers
    if config.input == "tokens":
        embed = (config.vocab_size + config.position_table + config.n_segments) * d
        head = 0 if config.tie_head else config.vocab_size * d
    else:
        embed = (config.channels * config.patch_size**2 + 1 + config.n_image_tokens
                 + (1 if config.pool == "cls" else 0)) * d
        head = config.n_classes * d
    attention = 2 * d * config.d_head * (config.n_heads + config.kv_heads)
    ffn_matrices = 3 if config.activation in GATED_ACTIVATIONS else 2
    per_layer = attention + ffn_matrices * d * config.ffn_width + 6 * d
    cross = (n_layers - config.n_layers) * (4 * d * d + 2 * d) if config.arch == "encoder_decoder" else 0
    return int(embed + head + n_layers * per_layer + cross + 2 * d)


def measure_bytes(config: TransformerConfig, batch_size: int) -> int:
    """Bytes to draw and measure one model of ``config`` on ``batch_size`` sequences (module docstring)."""
    tokens, L = batch_size * config.seq_len, config.seq_len
    per_layer = tokens * (10 * config.d_model + 2 * config.ffn_width) + 2 * batch_size * config.n_heads * L * L
    return int(4 * parameter_count(config) + SLACK * 4 * config.total_layers * per_layer)


def theory_bytes(config: TransformerConfig, batch_size: int = 0, heads: int = 128) -> int:
    """Bytes of a prediction of ``config``: the theory's model, with a batch of ``batch_size`` sequences the
    token-resolved sweep's Gram matrices, and the sampled attention rule's draws for ``heads`` heads (float64 inputs
    and Q, K weights, kept for a layer's forward and backward, twice for autograd; module docstring)."""
    grams = 3 * 8 * batch_size * config.seq_len**2
    L, d = config.seq_len, config.d_model
    draws = 2 * 8 * heads * (L * (2 * d + L) + 2 * d * config.d_head)
    return int(config.total_layers * (THEORY_LAYER_BYTES + grams) + draws)


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
