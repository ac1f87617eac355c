"""The sites of a model sigprop did not build, found from the model itself: its stack of blocks.

A transformer of any origin is a stack of blocks reading and writing one residual stream, so its measured sites are
the stream entering the first block (``(-1, "input")``: the embedding output as the first block reads it, after any
embedding dropout, norm or scaling, e.g. Gemma's √d) and the stream after each block (``(i, "layer")``), as for
sigprop's own models (:mod:`sigprop.measurement.hooks`). The stack is found, in this order:

1. a Hugging Face model: the ``nn.ModuleList``\\ s whose children are of a class in its ``_no_split_modules`` (the
   class Hugging Face never splits across devices: its block), all of them in module order, so that an
   encoder–decoder's encoder blocks are layers 0 … N − 1 and its decoder's follow, as in sigprop's models;
2. any other module: the longest ``nn.ModuleList`` or ``nn.Sequential`` whose children share one class and hold
   modules of their own (a list of norms or of bare linear maps is not a stack of blocks where a list of blocks
   exists), ignoring lists nested inside another ``nn.ModuleList`` (a mixture of experts inside each block, the heads
   inside a block of a list of mixed blocks) or inside a uniform ``nn.Sequential`` (the heads inside each block of a
   GPT whose blocks are an ``nn.Sequential``). Of two lists of that longest length, the one of the larger blocks (by
   parameters); blocks within 2× of each other's size (an encoder's and a decoder's, as in ``nn.Transformer``) are
   ambiguous: ``ValueError``, naming them, asks for ``sites=``.

``sites=`` overrides both. The input site is :class:`InputOf` the first block (a forward pre-hook reads its first
tensor argument, or its ``hidden_states`` keyword, or its one (batch, tokens, hidden) keyword tensor), so no embedding
module needs to be named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, cast

from torch import nn

__all__ = ["InputOf", "DiscoveredSites", "block_stacks", "discover_sites"]


class InputOf(NamedTuple):
    """A site whose tensor is ``module``'s input (its first tensor argument) rather than its output."""

    module: nn.Module


@dataclass(frozen=True)
class DiscoveredSites:
    """The sites of a model found from its block stacks.

    Attributes:
        sites: ``(layer, site, module or InputOf)`` in recording order.
        stacks: the names (module paths) of the block lists, in order.
        decoder_from: the first decoder layer of an encoder–decoder (two stacks and a Hugging Face config that says
            ``is_encoder_decoder``), else ``None``.
    """

    sites: list
    stacks: tuple[str, ...]
    decoder_from: int | None


#: A container of blocks that can be a stack.
BlockList = nn.ModuleList | nn.Sequential


def _uniform(module: nn.Module) -> bool:
    """Whether ``module`` is a non-empty ``nn.ModuleList`` whose children share one class, or an ``nn.Sequential``
    of blocks of one class (modules of their own that are not containers: a chain of bare layers is no stack)."""
    if not isinstance(module, nn.ModuleList | nn.Sequential) or len(module) == 0:
        return False
    kinds = {type(child) for child in module}
    if len(kinds) != 1:
        return False
    if isinstance(module, nn.ModuleList):
        return True
    first = next(iter(module.children()))
    return (not isinstance(first, nn.ModuleList | nn.Sequential | nn.ModuleDict)
            and any(True for _ in first.children()))


def _uniform_lists(model: nn.Module, classes: set[str] | None) -> list[tuple[str, BlockList]]:
    """(path, list) of the ``nn.ModuleList``\\ s and ``nn.Sequential``\\ s whose children share one class (of
    ``classes`` when given), outermost only: a list inside another ``nn.ModuleList``'s children (uniform or not), or
    inside a uniform ``nn.Sequential``'s (a stack of blocks, as in a GPT whose blocks are an ``nn.Sequential`` and
    whose attention heads a list in each block), is left out."""
    outers = [path for path, module in model.named_modules()
              if isinstance(module, nn.ModuleList) or (isinstance(module, nn.Sequential) and _uniform(module))]
    found: list[tuple[str, BlockList]] = []
    for path, module in model.named_modules():
        if not _uniform(module):
            continue
        if any(path.startswith(outer + ".") for outer in outers if outer != path):
            continue
        if classes is not None and type(next(iter(module.children()))).__name__ not in classes:
            continue
        found.append((path, cast(BlockList, module)))  # _uniform: a ModuleList or a Sequential
    return found


def block_stacks(model: nn.Module) -> list[tuple[str, BlockList]]:
    """The block stacks of ``model`` (module docstring): (module path, list) pairs, in module order.

    Args:
        model: any ``nn.Module``.

    Returns:
        One pair for a decoder or an encoder, two for an encoder–decoder; empty when no stack is found.

    Raises:
        ValueError: outside a Hugging Face model, two lists of blocks of like size tie as the stack.

    Example:
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Embedding(10, 4), nn.ModuleList([nn.Linear(4, 4) for _ in range(3)]))
        >>> [(path, len(blocks)) for path, blocks in block_stacks(net)]
        [('1', 3)]
    """
    no_split = getattr(model, "_no_split_modules", None)
    if no_split:
        stacks = _uniform_lists(model, set(no_split))
        if stacks:
            return stacks
    lists = _uniform_lists(model, None)
    if not lists:
        return []
    rank = {path: (any(True for _ in blocks[0].children()), len(blocks)) for path, blocks in lists}
    best = max(rank.values())
    tied = sorted(((sum(p.numel() for p in blocks[0].parameters()), path, blocks) for path, blocks in lists
                   if rank[path] == best), key=lambda t: -t[0])
    if len(tied) > 1 and 2 * tied[1][0] >= tied[0][0]:  # blocks of like size: an encoder's and a decoder's
        raise ValueError(f"{type(model).__name__} holds {len(tied)} lists of {best[1]} blocks of like size ("
                         + ", ".join(path for _, path, _ in tied) + "): which is the stack is ambiguous; pass "
                         "sites=[(layer, site, module), ...]")
    return [(tied[0][1], tied[0][2])]


def discover_sites(model: nn.Module) -> DiscoveredSites:
    """The sites of ``model`` from its block stacks (module docstring).

    Args:
        model: any ``nn.Module`` holding a stack of blocks.

    Returns:
        The sites, the stacks they came from and, for two stacks, where the decoder's layers start.

    Raises:
        ValueError: no stack of blocks found, or two that tie (the message says what was looked for and how to pass
            ``sites=``).

    Example:
        >>> from torch import nn
        >>> net = nn.Sequential(nn.Embedding(10, 4), nn.ModuleList([nn.Linear(4, 4) for _ in range(3)]))
        >>> [(layer, site) for layer, site, _ in discover_sites(net).sites]
        [(-1, 'input'), (0, 'layer'), (1, 'layer'), (2, 'layer')]
    """
    stacks = block_stacks(model)
    if not stacks:
        raise ValueError(f"no stack of blocks found in {type(model).__name__}: sigprop looks for the block class of a "
                         "Hugging Face model's _no_split_modules, else an nn.ModuleList or nn.Sequential whose "
                         "children share one class; pass sites=[(layer, site, module), ...]")
    blocks = [block for _, stack in stacks for block in stack]
    sites = [(-1, "input", InputOf(blocks[0]))] + [(i, "layer", block) for i, block in enumerate(blocks)]
    encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    decoder_from = len(stacks[0][1]) if len(stacks) == 2 and encoder_decoder else None
    return DiscoveredSites(sites=sites, stacks=tuple(path for path, _ in stacks), decoder_from=decoder_from)
