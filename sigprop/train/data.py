"""What a model trains on: a deterministic held-out split of the corpus (by file) or of the images, and each step's
batch as a pure function of (seed, step), so that a resumed run, or a run on another number of processes, sees the
same data in the same order.

Objectives (:func:`sigprop.model.objective.make_batch` builds the token ones):

* encoder: masked-LM (BERT's 15 % selection, 80/10/10), Kedia et al. Sec. 4.1;
* decoder: next-token prediction;
* encoder–decoder: **continuation** on the corpus, a real sequence-to-sequence task: the encoder reads L tokens of a
  file and the decoder writes the next L, teacher-forced (its input at position i is the target's token i − 1, the
  first being the source's last token), so that every target token is predicted and the decoder must use the
  encoder to predict the first ones;
* patch model (ViT): image classification (the digits, or a folder of images or a ``.npy`` array).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import torch

from ..model.batch import Batch

__all__ = ["TrainData", "TextData", "ImageData", "make_data", "step_generator", "rank_slice"]

#: Salt of the hash that decides which files (or images) are held out.
_SPLIT_SALT = b"sigprop-train-split-v1"


def step_generator(seed: int, step: int, stream: int = 0) -> torch.Generator:
    """A CPU generator for step ``step`` of a run with ``seed`` (``stream`` keeps independent uses apart): the data
    of a step never depends on the steps before it."""
    digest = hashlib.sha256(f"{seed}:{step}:{stream}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def rank_slice(batch: Batch, rank: int, world: int) -> Batch:
    """Rank ``rank``'s share of a global batch: rows [rank·B/world, (rank+1)·B/world) of every tensor."""
    if world == 1:
        return batch
    n = batch.sequences // world
    return batch.rows(rank * n, (rank + 1) * n)


class TrainData:
    """The protocol the trainer reads: ``train_batch(step, batch_size, rank, world)`` (rank ``rank``'s share of the
    global batch of step ``step``), ``val_batches(n, batch_size, rank, world)``,
    ``probe_batch(n)`` (the fixed batch the tracker measures), ``tokens(batch)``, ``meta()`` (what the run directory
    records) and ``is_images``."""

    is_images = False

    def train_batch(self, step: int, batch_size: int, rank: int = 0, world: int = 1) -> Batch:
        raise NotImplementedError

    def val_batches(self, n_batches: int, batch_size: int, rank: int = 0, world: int = 1) -> list[Batch]:
        raise NotImplementedError

    def probe_batch(self, n: int) -> Batch:
        raise NotImplementedError

    def tokens(self, batch: Batch) -> int:
        """The tokens a batch feeds the model: its token ids (an encoder–decoder's decoder side too), or for
        images their patches."""
        n = int(batch.inputs.numel()) if not self.is_images else batch.sequences * self.model_config.seq_len
        return n + (int(batch.decoder_inputs.numel()) if batch.decoder_inputs is not None else 0)

    def meta(self) -> Batch:
        raise NotImplementedError


def _by_hash(parts: list[np.ndarray], fraction: float) -> np.ndarray:
    """Which parts are held out: those whose SHA-256 (of their bytes, salted) falls in the lowest ``fraction`` of
    the hash range; at least one part is held out and at least one kept."""
    keys = np.array([int.from_bytes(hashlib.sha256(_SPLIT_SALT + p.tobytes()).digest()[:8], "little")
                     for p in parts], dtype=np.float64) / 2.0**64
    held = keys < fraction
    if not held.any():
        held[int(np.argmin(keys))] = True
    if held.all():
        held[int(np.argmax(keys))] = False
    return held


@dataclass
class TextData(TrainData):
    """Token data for a token model: the corpus's files split into train and validation by a hash of each file's
    token ids (the same split whatever the order or the machine), each side one id stream. ``meta()`` records the
    SHA-256 of both streams (:mod:`sigprop.data.fingerprint`), computed once."""

    model_config: object
    seed: int
    train_ids: np.ndarray
    val_ids: np.ndarray
    split: str
    n_files: int
    n_val_files: int
    _fingerprint: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_corpus(cls, model_config, train_config, progress: bool = False) -> TextData:
        """Tokenise the corpus (the tokenizer of ``model_config.vocab_size``, trained and cached locally) and split
        it. A corpus of one file is split by position instead (its last ``val_fraction`` of tokens)."""
        ids, sep = _corpus_ids(model_config, train_config, progress)
        cuts = np.flatnonzero(ids == sep)
        docs = np.split(ids, cuts)  # every document after the first starts with its [SEP]
        window = cls.window_length(model_config)
        if len(docs) >= 2:
            held = _by_hash(docs, train_config.val_fraction)
            train = np.concatenate([d for d, h in zip(docs, held, strict=True) if not h])
            val = np.concatenate([d for d, h in zip(docs, held, strict=True) if h])
            split, n_val = "by file", int(held.sum())
        else:
            cut = int(len(ids) * (1.0 - train_config.val_fraction))
            train, val, split, n_val = ids[:cut], ids[cut:], "by position (the corpus is one file)", 0
        for name, part in (("training", train), ("validation", val)):
            if len(part) < window:
                raise ValueError(f"the corpus's {name} part has {len(part)} tokens, fewer than one window of "
                                 f"{window}: use more text (--data) or a shorter seq_len")
        return cls(model_config, train_config.seed, train, val, split, len(docs), n_val)

    @staticmethod
    def window_length(model_config) -> int:
        """Tokens a sequence needs: L, or 2L for the encoder–decoder's continuation task."""
        return model_config.seq_len * (2 if model_config.arch == "encoder_decoder" else 1)

    def _windows(self, ids: np.ndarray, offsets: np.ndarray) -> torch.Tensor:
        w = self.window_length(self.model_config)
        return torch.from_numpy(ids[offsets[:, None] + np.arange(w)[None, :]].astype(np.int64))

    def _batch(self, windows: torch.Tensor, generator: torch.Generator) -> Batch:
        from ..model.objective import make_batch

        cfg = self.model_config
        if cfg.arch != "encoder_decoder":
            return make_batch(cfg, windows, generator=generator)
        L = cfg.seq_len
        return Batch(windows[:, :L], labels=windows[:, L:].contiguous(),
                     decoder_inputs=windows[:, L - 1:2 * L - 1].contiguous())

    def train_batch(self, step: int, batch_size: int, rank: int = 0, world: int = 1) -> Batch:
        gen = step_generator(self.seed, step)
        high = len(self.train_ids) - self.window_length(self.model_config) + 1
        offsets = torch.randint(0, high, (batch_size,), generator=gen).numpy()
        return rank_slice(self._batch(self._windows(self.train_ids, offsets), gen), rank, world)

    def val_batches(self, n_batches: int, batch_size: int, rank: int = 0, world: int = 1) -> list[Batch]:
        """``n_batches`` fixed batches of windows spread evenly over the held-out stream, their starts
        ⌊(held-out tokens − window + 1)/(n_batches × batch_size)⌋ apart: non-overlapping where that spacing is at
        least a window (a stream of at least (windows + 1) × window − 1 tokens), overlapping where it is not (each
        token then scored about window × windows / stream times),
        wrapping round when it is shorter than the windows' starts. The windows depend on ``n_batches ×
        batch_size`` only, not on the run's seed. A
        masked LM's masks are drawn per batch from the run's seed (stream 1), so two models at one seed are scored
        on the same masks and a model's seeds on different ones (docs/results/experiments/depth-mlm.md)."""
        w = self.window_length(self.model_config)
        n = n_batches * batch_size
        usable = len(self.val_ids) - w + 1
        offsets = (np.arange(n, dtype=np.int64) * max(1, usable // n)) % usable
        out = []
        for b in range(n_batches):
            gen = step_generator(self.seed, b, stream=1)
            batch = self._batch(self._windows(self.val_ids, offsets[b * batch_size:(b + 1) * batch_size]), gen)
            out.append(rank_slice(batch, rank, world))
        return out

    def probe_batch(self, n: int) -> Batch:
        return self.val_batches(1, n)[0]

    def meta(self) -> dict:
        from ..data.fingerprint import ids_fingerprint

        if not self._fingerprint:
            self._fingerprint.update(train_sha256=ids_fingerprint(self.train_ids),
                                     validation_sha256=ids_fingerprint(self.val_ids))
        return {"kind": "text", "split": self.split, "files": self.n_files, "validation_files": self.n_val_files,
                "train_tokens": int(len(self.train_ids)), "validation_tokens": int(len(self.val_ids)),
                **self._fingerprint,
                "task": {"encoder": "masked language modelling", "decoder": "next-token prediction",
                         "encoder_decoder": "continuation: the next seq_len tokens of a file from the seq_len "
                                            "before them"}[self.model_config.arch]}


@dataclass
class ImageData(TrainData):
    """Images for a patch model: the digits (or the user's images) split into train and validation by a hash of
    each image's pixels."""

    model_config: object
    seed: int
    train_x: torch.Tensor
    train_y: torch.Tensor
    val_x: torch.Tensor
    val_y: torch.Tensor
    source: str
    is_images = True

    @classmethod
    def load(cls, model_config, train_config) -> ImageData:
        cfg = model_config
        if train_config.data is None:
            from ..data.digits import N_DIGIT_CLASSES, digits

            if cfg.n_classes < N_DIGIT_CLASSES:
                raise ValueError(f"the digits have {N_DIGIT_CLASSES} classes but the model has n_classes = "
                                 f"{cfg.n_classes}: set n_classes >= 10, or train on your images (--data)")
            x, y = digits(size=cfg.image_size, channels=cfg.channels, normalise="rms")
            source = "scikit-learn digits"
        else:
            from pathlib import Path

            from ..data.images import read_images

            p = Path(train_config.data)
            if not p.exists():
                raise ValueError(f"image data not found: {p}")
            x, y = read_images(p, None, cfg.image_size, cfg.channels, cfg.n_classes)
            source = str(p)
        if len(x) < 2:
            raise ValueError(f"{source} holds {len(x)} image(s); training needs at least 2 (one is held out for "
                             "validation)")
        if int(torch.unique(y).numel()) < 2:  # a constant label is learnt at once and reads as accuracy 1
            raise ValueError(f"{source}: every image has the same label (a .npy array carries no labels; a folder "
                             "gives one class per subfolder): training a classifier needs at least two classes")
        parts = [xi.numpy() for xi in x]
        held = torch.from_numpy(_by_hash(parts, train_config.val_fraction))
        return cls(cfg, train_config.seed, x[~held], y[~held], x[held], y[held], source)

    def train_batch(self, step: int, batch_size: int, rank: int = 0, world: int = 1) -> Batch:
        gen = step_generator(self.seed, step)
        idx = torch.randint(0, len(self.train_y), (batch_size,), generator=gen)
        return rank_slice(Batch(self.train_x[idx], self.train_y[idx]), rank, world)

    def val_batches(self, n_batches: int, batch_size: int, rank: int = 0, world: int = 1) -> list[Batch]:
        """The whole held-out set in batches of ``batch_size`` (``n_batches`` is ignored: it is small); with
        several processes each batch is split into near-equal shares, one per process (a share may be empty and is
        then left out), so that every image is scored once whatever the number of processes (the evaluation sums
        the losses of all processes once, after its batches)."""
        out = []
        for start in range(0, len(self.val_y), batch_size):
            x, y = self.val_x[start:start + batch_size], self.val_y[start:start + batch_size]
            lo, hi = rank * len(y) // world, (rank + 1) * len(y) // world
            if hi > lo:
                out.append(Batch(x[lo:hi], y[lo:hi]))
        return out

    def probe_batch(self, n: int) -> Batch:
        return Batch(self.val_x[:n], self.val_y[:n])

    def meta(self) -> dict:
        from ..data.fingerprint import images_fingerprint

        return {"kind": "images", "source": self.source, "split": "by image", "train_images": int(len(self.train_y)),
                "validation_images": int(len(self.val_y)),
                "train_sha256": images_fingerprint(self.train_x.numpy(), self.train_y.numpy()),
                "validation_sha256": images_fingerprint(self.val_x.numpy(), self.val_y.numpy()),
                "task": "image classification"}


def _corpus_ids(model_config, train_config, progress: bool) -> tuple[np.ndarray, int]:
    """The corpus's token ids and its ``[SEP]`` id: a pinned corpus's stored ids (its vocabulary must be the
    model's), or the corpus tokenised with the tokenizer of ``model_config.vocab_size`` (trained and cached)."""
    from ..data.pinned import is_pinned, pinned_corpus

    if is_pinned(train_config.data):
        corpus = pinned_corpus(train_config.data)
        if corpus.vocab_size != model_config.vocab_size:
            raise ValueError(f"data {train_config.data!r} holds token ids of a vocabulary of {corpus.vocab_size}; "
                             f"the model's vocab_size is {model_config.vocab_size}: set vocab_size={corpus.vocab_size}")
        return corpus.ids, corpus.sep_id
    from ..data.batches import TokenStream
    from ..data.tokenizer import special_id

    stream = TokenStream.from_corpus(train_config.data, model_config.vocab_size, progress=progress)
    return stream.ids, special_id(stream.tokenizer, "[SEP]")


def make_data(model_config, train_config, progress: bool = False) -> TrainData:
    """The data of a run: images for a patch model, else the tokenised corpus."""
    if model_config.input == "patches":
        return ImageData.load(model_config, train_config)
    return TextData.from_corpus(model_config, train_config, progress=progress)
