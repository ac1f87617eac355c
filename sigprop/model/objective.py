"""Training objectives and the batches they need: masked-LM for encoders, next-token for decoders and
encoder–decoders, classification for patch models. A batch is a :class:`~sigprop.model.batch.Batch` (the
objectives also take sigprop's batch dict, read into one)."""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F

from ..data.mlm import IGNORE_INDEX
from .batch import Batch

if TYPE_CHECKING:
    import numpy.typing as npt

    from .config import TransformerConfig
    from .transformer import Transformer

__all__ = ["make_batch", "objective_loss", "objective_sums", "segment_halves", "check_model_inputs", "MASK_ID",
           "PAD_ID", "N_SPECIAL"]

#: Ids of the special tokens in sigprop's tokenizer (:data:`sigprop.data.tokenizer.SPECIAL_TOKENS` order).
PAD_ID, MASK_ID = 0, 1
#: Number of special tokens (ids below it are never drawn as random replacements).
N_SPECIAL = 5


def segment_halves(inputs: torch.Tensor, n_segments: int) -> torch.Tensor:
    """Segment ids of BERT's sentence-pair input: the first half of every sequence is segment 0, the second
    segment 1 (or 0 for a single segment type)."""
    L = inputs.shape[-1]
    ids = (torch.arange(L, device=inputs.device) >= (L + 1) // 2).long().clamp(max=n_segments - 1)
    return ids.expand_as(inputs).clone()


def make_batch(config: TransformerConfig, inputs: torch.Tensor, generator: torch.Generator | None = None,
               padding_mask: torch.Tensor | None = None, labels: torch.Tensor | None = None,
               mask_id: int = MASK_ID) -> Batch:
    """The batch for ``config``'s objective from raw ``inputs``.

    * encoder, tokens: BERT masking of ``config.mask_prob`` of the real tokens (80% [MASK], 10% random, 10% kept;
      Kedia et al. Sec. 4.1), labels −100 elsewhere;
    * decoder: next-token labels (the last position and padding get −100);
    * encoder–decoder: the inputs feed both sides (a denoising/copy objective: the encoder sees the masked
      sequence, the decoder predicts the next token of the original);
    * patches: ``labels`` are class ids (required).

    With segment embeddings the batch carries ``segment_ids`` (:func:`segment_halves`: BERT's sentence pair, the
    first half of each sequence segment 0).

    Args:
        config: the model's :class:`~sigprop.model.config.TransformerConfig` (its ``arch``, ``input``,
            ``mask_prob``, ``vocab_size``, ``n_segments``).
        inputs: token ids (batch, L), or images (batch, channels, height, width) for a patch model.
        generator: the masking's random stream (default: torch's global one).
        padding_mask: bool (batch, L), True = real token; padding is never masked and never labelled. Other
            special tokens among the ids (the [SEP] between documents) may be masked like any token, where BERT's
            pre-training never selects them; in sigprop's corpora they are rare.
        labels: a patch model's class ids (batch,); not read for token models.
        mask_id: the id that replaces a masked token (sigprop's [MASK]; another tokenizer's own, e.g. a Hugging
            Face folder's).

    Returns:
        A :class:`sigprop.Batch` with ``inputs`` and ``labels`` (and ``padding_mask``, ``segment_ids``,
        ``decoder_inputs``, ``decoder_padding_mask`` where they apply): what :meth:`Transformer.loss
        <sigprop.Transformer.loss>` and :func:`sigprop.measure` read (``to_dict()`` gives sigprop's batch dict).

    Raises:
        ValueError: a patch model without ``labels``.

    Example:
        >>> import torch, sigprop
        >>> config = sigprop.TransformerConfig(arch="decoder", n_layers=2, d_model=16, n_heads=2, vocab_size=64,
        ...                                    seq_len=8)
        >>> batch = sigprop.make_batch(config, torch.tensor([[5, 6, 7, 8]]))
        >>> batch.labels.tolist()  # the next token; nothing follows the last
        [[6, 7, 8, -100]]
        >>> encoder = config.replace(arch="encoder", mask_prob=0.5)
        >>> ids = torch.randint(5, 64, (4, 8), generator=torch.Generator().manual_seed(0))
        >>> masked = sigprop.make_batch(encoder, ids, torch.Generator().manual_seed(1))
        >>> labelled = masked.labels != -100
        >>> bool((masked.labels[labelled] == ids[labelled]).all())  # a masked position's label: its token
        True
    """
    from ..data.mlm import causal_lm_labels, mask_tokens

    segments = segment_halves(inputs, config.n_segments) if config.input == "tokens" and config.n_segments else None
    if config.input == "patches":
        if labels is None:
            raise ValueError("a patch model needs class labels")
        return Batch(inputs, labels)
    pad = None  # padding is what padding_mask says, whatever id it holds (a tokenizer's id 0 may be a real token)
    if config.arch == "encoder":
        masked, mlm_labels = mask_tokens(inputs, mask_id, prob=config.mask_prob, generator=generator, pad_id=pad,
                                         vocab_size=config.vocab_size, random_low=N_SPECIAL, padding_mask=padding_mask)
        return Batch(masked, mlm_labels, padding_mask, segments)
    next_labels = causal_lm_labels(inputs, pad_id=pad, padding_mask=padding_mask)
    if config.arch == "decoder":
        return Batch(inputs, next_labels, padding_mask, segments)
    masked, _ = mask_tokens(inputs, mask_id, prob=config.mask_prob, generator=generator, pad_id=pad,
                            vocab_size=config.vocab_size, random_low=N_SPECIAL, padding_mask=padding_mask)
    return Batch(masked, next_labels, padding_mask, segments, decoder_inputs=inputs, decoder_padding_mask=padding_mask)


def _labelled(batch: Batch | dict | torch.Tensor, model: torch.nn.Module) -> Batch:
    """``batch`` (a :class:`Batch`, sigprop's dict, or a tensor of token ids, labelled here by :func:`make_batch`
    for the objective of ``model``'s config (a wrapper's, e.g. DistributedDataParallel, read from its ``module``), its
    masks drawn from a generator seeded 0) as a :class:`Batch` with labels; ``ValueError`` otherwise."""
    if isinstance(batch, torch.Tensor) and not batch.is_floating_point():
        config = cast("TransformerConfig", getattr(model, "module", model).config)
        if config.input == "tokens":
            return make_batch(config, batch, torch.Generator(device=batch.device).manual_seed(0))
    if isinstance(batch, Batch) or (isinstance(batch, dict) and "inputs" in batch):
        out = Batch.from_any(batch)
        if out.labels is not None:
            return out
    raise ValueError("a batch is a dict with 'inputs' and 'labels', or a tensor of token ids (build one with "
                     "sigprop.model.make_batch)")


def _logits(model: Transformer, batch: Batch) -> torch.Tensor:
    logits = model(batch.inputs, segment_ids=batch.segment_ids, padding_mask=batch.padding_mask,
                   decoder_inputs=batch.decoder_inputs, decoder_padding_mask=batch.decoder_padding_mask)
    return logits.reshape(-1, logits.shape[-1])


def objective_loss(model: Transformer, batch: Batch | dict) -> torch.Tensor:
    """Mean cross-entropy over the positions whose label is not −100 (the class for a patch model)."""
    batch = _labelled(batch, model)
    labels = cast(torch.Tensor, batch.labels)  # _labelled: never None
    return F.cross_entropy(_logits(model, batch), labels.reshape(-1), ignore_index=IGNORE_INDEX)


def objective_sums(model: Transformer, batch: Batch | dict, *,
                   top1: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, labelled positions, correct top-1 predictions) of ``model`` on ``batch``, the loss in
    float32 whatever the autocast: the parts a distributed run adds over its processes before dividing, so that its
    loss is the mean over the global batch whatever the split (masked-LM batches label different counts).

    Args:
        model: a sigprop :class:`~sigprop.model.transformer.Transformer`.
        batch: a :class:`~sigprop.model.batch.Batch` or sigprop's dict, with labels (−100: unlabelled).
        top1: count the correct top-1 predictions. An arg-max over the vocabulary costs about as much as the
            cross-entropy itself on a CPU, so the training step (whose loss alone matters) and a language model's
            validation leave it out; the count is then 0.

    Returns:
        (summed cross-entropy, labelled positions, correct top-1 predictions), each a 0-d tensor.

    Example:
        >>> import torch
        >>> from sigprop.model import Transformer, TransformerConfig
        >>> config = TransformerConfig(arch="decoder", n_layers=1, d_model=16, n_heads=1, vocab_size=50, seq_len=8,
        ...                            max_len=8)
        >>> model = Transformer(config, generator=torch.Generator().manual_seed(0))
        >>> batch = make_batch(config, torch.arange(5, 13)[None])
        >>> total, count, correct = objective_sums(model, batch, top1=False)
        >>> int(count), int(correct)  # 7 next-token labels; the top-1 count left out
        (7, 0)
    """
    batch = _labelled(batch, model)
    logits = _logits(model, batch).float()
    labels = cast(torch.Tensor, batch.labels).reshape(-1)  # _labelled: never None
    keep = labels != IGNORE_INDEX
    total = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    if not top1:
        return total, keep.sum(), torch.zeros((), dtype=torch.long, device=labels.device)
    with torch.no_grad():
        correct = ((logits.argmax(-1) == labels) & keep).sum()
    return total, keep.sum(), correct


def _ids(t: npt.ArrayLike | torch.Tensor, name: str, high: int, what: str, allow_ignore: bool = False) -> torch.Tensor:
    """``t`` as a 2-D integer tensor (a 1-D one is one sequence) of values in [0, high) (or −100 where
    ``allow_ignore``); ``ValueError`` naming ``name`` otherwise."""
    t = torch.as_tensor(t)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer {what} (got dtype {t.dtype})")
    if t.dim() == 1:
        t = t[None]
    if t.dim() != 2 or t.numel() == 0:
        raise ValueError(f"{name} must have shape (batch, length) (got {tuple(t.shape)})")
    bad = (t < 0) | (t >= high)
    if allow_ignore:
        bad &= t != IGNORE_INDEX
    if bool(bad.any()):
        ignore = f" or be {IGNORE_INDEX}" if allow_ignore else ""
        raise ValueError(f"{name} must lie in [0, {high}){ignore} ({what}; got {int(t[bad].flatten()[0])})")
    return t


def check_model_inputs(config: TransformerConfig, *, token_ids: torch.Tensor | None = None,
                       images: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                       decoder_token_ids: torch.Tensor | None = None, segment_ids: torch.Tensor | None = None,
                       pad_id: int | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None,
                                                           torch.Tensor | None, torch.Tensor | None]:
    """Validate a batch's tensors against ``config``, as every entry point that takes them does (``predict``,
    ``measure``'s batches): token ids of an integer type inside the vocabulary (a 1-D tensor is one sequence),
    labels of the ids' shape (−100 = unlabelled), segment ids below ``n_segments``, or for a patch model finite
    float images (batch, channels, image_size, image_size) and one class per image. Returns (token_ids, images,
    labels, decoder_token_ids) as tensors, ids 2-D. ``ValueError`` naming the argument otherwise."""
    if config.input == "patches":
        if token_ids is not None or decoder_token_ids is not None:
            raise ValueError("token_ids: this config takes image patches (input='patches'), not tokens: pass images=")
        if images is not None:
            images = torch.as_tensor(images)
            shape = (config.channels, config.image_size, config.image_size)
            if not images.dtype.is_floating_point or images.dim() != 4 or tuple(images.shape[1:]) != shape:
                raise ValueError(f"images must be a float tensor of shape (batch, {', '.join(map(str, shape))}) "
                                 f"(got {images.dtype}, {tuple(images.shape)})")
            if not bool(torch.isfinite(images).all()):
                raise ValueError("images must be finite (NaN or inf found)")
        if labels is not None:
            labels = torch.as_tensor(labels)
            if labels.dim() != 1 or (images is not None and labels.shape[0] != images.shape[0]):
                raise ValueError(f"a patch model's labels are one class per image: shape "
                                 f"({'batch' if images is None else images.shape[0]},), got {tuple(labels.shape)}")
            labels = _ids(labels, "labels", config.n_classes, "class ids")[0]
        return None, images, labels, None
    if images is not None:
        raise ValueError("images: this config takes tokens (input='tokens'); a ViT is input='patches'")
    V = config.vocab_size
    if token_ids is not None:
        token_ids = _ids(token_ids, "token_ids", V, f"ids of the vocabulary of {V}")
    if decoder_token_ids is not None:
        if config.arch != "encoder_decoder":
            raise ValueError("decoder_token_ids: only an encoder-decoder has a decoder input")
        decoder_token_ids = _ids(decoder_token_ids, "decoder_token_ids", V, f"ids of the vocabulary of {V}")
    if labels is not None:
        labels = _ids(labels, "labels", V, "target ids", allow_ignore=True)
        target = decoder_token_ids if config.arch == "encoder_decoder" and decoder_token_ids is not None \
            else token_ids
        if target is not None and labels.shape != target.shape:
            raise ValueError(f"labels must have the shape of the {'decoder ' if target is decoder_token_ids else ''}"
                             f"token ids {tuple(target.shape)} (got {tuple(labels.shape)})")
    if segment_ids is not None:
        if not config.n_segments:
            raise ValueError("segment_ids: the config has no segment embedding (n_segments = 0)")
        seg = _ids(segment_ids, "segment_ids", config.n_segments, "segment ids")
        if token_ids is not None and seg.shape != token_ids.shape:
            raise ValueError(f"segment_ids must have the shape of the token ids {tuple(token_ids.shape)}")
    if pad_id is not None and (isinstance(pad_id, bool) or not isinstance(pad_id, numbers.Integral)
                               or not 0 <= pad_id < V):
        raise ValueError(f"pad_id must be an id of the vocabulary, an integer in [0, {V}) (got {pad_id!r})")
    return token_ids, None, labels, decoder_token_ids
