"""``sigprop measure --hf``: a Hugging Face model of any family from a local folder (or a ``config.json``) measured
through sigprop.

A folder with safetensors weights is one trained (or saved) model: it is loaded once and measured as it is. A
``config.json`` alone (or a folder without weights) is a model at initialisation: each seed builds it from the config
under ``torch.manual_seed(seed)`` (Hugging Face's own ``_init_weights``), and the seeds are averaged as for sigprop's
models. Pickled weights (``pytorch_model.bin``) are never read.

The model is measured as the class of its pre-training objective: a mapped family's (causal LM, masked LM: the
objective of its mapped configuration, whatever head the folder was saved with), else the class its ``config.json``
names (``architectures``), else the masked-LM or causal-LM class Hugging Face registers for its configuration.
A family whose configuration sigprop maps (:data:`~sigprop.hf.config_map.FAMILIES`) is
measured on the batch of its mapped configuration, so that the theory can be set beside it; any other on a batch of
the same kind built from its configuration (:func:`hf_token_batch`), and its profile says why the theory is not
available (``meta["theory"]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.profile import Profile
from ..measurement.average import average_profiles
from ..measurement.hooks import measure
from ..measurement.merge import per_seed_table
from ..model.batch import Batch
from .config_map import DEFAULT_SEQ_LEN, FAMILIES

__all__ = ["HFSource", "NotInCache", "resolve_hf_location", "read_hf_source", "hf_class", "build_hf_model",
           "load_hf_model", "folder_tokenizer", "tokenizer_ids", "hf_batch", "hf_token_batch", "measure_hf"]

#: Mapped families whose pre-training objective is masked language modelling (the others: the next token).
#: A mapped family → the ``transformers`` auto class of the objective its mapped configuration trains (a family not
#: listed: a causal LM).
_FAMILY_CLASSES = {"bert": "AutoModelForMaskedLM", "roberta": "AutoModelForMaskedLM",
                   "vit": "AutoModelForImageClassification"}


@dataclass(frozen=True)
class HFSource:
    """A local Hugging Face model: its configuration and, where the folder holds safetensors weights, the folder."""

    config: object
    weights: Path | None
    path: Path


def _looks_like_a_name(text: str) -> bool:
    """``org/name`` or ``name``: a Hugging Face model id rather than a path (no leading dot or slash, at most one
    slash, no backslash)."""
    return bool(text) and not text.startswith((".", "/", "~")) and text.count("/") <= 1 and "\\" not in text


class NotInCache(ValueError):
    """A model id that is not in the local Hugging Face cache (``cache``: where it was looked for)."""

    def __init__(self, message: str, cache: str):
        super().__init__(message)
        self.cache = cache


def resolve_hf_location(location) -> Path:
    """The local folder of ``location``: an existing file or folder as it is, else a model id (``org/name``) looked
    up in the local Hugging Face cache (``HF_HUB_CACHE`` / ``HF_HOME``; nothing is downloaded).

    Args:
        location: a path, or a model id the user has downloaded before.

    Returns:
        The path (for a model id, its cached snapshot folder).

    Raises:
        ValueError: not an existing path and not shaped like a model id; :class:`NotInCache` (a ``ValueError``) for a
            model id not in the local cache (one line, naming where it looked).
    """
    path = Path(location)
    if path.exists():
        return path
    text = str(location)
    if not _looks_like_a_name(text):
        raise ValueError(f"--hf: file or folder not found: {path}")
    from huggingface_hub import constants, snapshot_download

    try:
        return Path(snapshot_download(repo_id=text, local_files_only=True))
    except Exception:  # noqa: BLE001 (the hub raises several kinds for a model that is not cached)
        raise NotInCache(f"--hf {text}: not a local folder, and not in the local Hugging Face cache "
                         f"({constants.HF_HUB_CACHE}); sigprop downloads nothing: download it first or pass its "
                         "folder", str(constants.HF_HUB_CACHE)) from None


def read_hf_source(path) -> HFSource:
    """Read ``path``: a folder with ``config.json`` (and maybe ``*.safetensors`` weights), a ``config.json`` file or
    a model id in the local Hugging Face cache (:func:`resolve_hf_location`).
    ``ValueError`` naming the problem (no config, pickled weights only, a model type this ``transformers`` does not
    know)."""
    import transformers

    path = resolve_hf_location(path)
    folder = path if path.is_dir() else path.parent
    config_file = path if path.is_file() else path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"--hf {path}: no config.json (give a local model folder or its config.json)")
    try:
        config = transformers.AutoConfig.from_pretrained(str(config_file), local_files_only=True)
    except (ValueError, KeyError, OSError) as err:
        raise ValueError(f"--hf {path}: transformers {transformers.__version__} cannot read this config.json "
                         f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    weights = None
    if path.is_dir():
        if any(folder.glob("*.safetensors")):
            weights = folder
        elif any(folder.glob("*.bin")) or any(folder.glob("*.pt")):
            raise ValueError(f"--hf {path}: only pickled weights (.bin / .pt), which sigprop never loads; save the "
                             "model with safe_serialization=True (safetensors)")
    return HFSource(config=config, weights=weights, path=path)


def hf_class(config):
    """The ``transformers`` class a model of ``config`` is measured as (module docstring). ``ValueError`` when
    neither its ``architectures`` nor a causal-LM or masked-LM class fits it."""
    import transformers

    family = FAMILIES.get(config.model_type)
    if family is not None:  # a mapped family: the class of the objective its mapped configuration trains
        name = _FAMILY_CLASSES.get(family, "AutoModelForCausalLM")
        mapping = getattr(transformers, name)._model_mapping
        if type(config) not in mapping:
            raise ValueError(f"transformers {transformers.__version__} has no {name} class for a "
                             f"{config.model_type!r} config")
        return mapping[type(config)]
    for name in (getattr(config, "architectures", None) or [])[:1]:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    # an encoder (BERT-like) registers a causal-LM variant too: its masked LM is the model unless it is a decoder
    order = ("AutoModelForCausalLM", "AutoModelForMaskedLM") if getattr(config, "is_decoder", False) else (
        "AutoModelForMaskedLM", "AutoModelForCausalLM")
    for name in order:
        mapping = getattr(transformers, name)._model_mapping
        if type(config) in mapping:
            return mapping[type(config)]
    raise ValueError(f"a {config.model_type!r} model has no causal-LM or masked-LM class and its config.json names "
                     "no architecture: measure it from Python, sigprop.measure(model, batch)")


def build_hf_model(source: HFSource, seed: int):
    """A freshly initialised model of ``source``'s configuration under ``torch.manual_seed(seed)`` (Hugging Face's
    own ``_init_weights``)."""
    torch.manual_seed(seed)
    return hf_class(source.config)._from_config(source.config)


def load_hf_model(source: HFSource, seed: int = 0):
    """The model saved in ``source``'s folder (safetensors only, nothing downloaded), as the class of its
    pre-training objective (:func:`hf_class`), under ``torch.manual_seed(seed)`` as :func:`build_hf_model`: the
    dropout masks of the measurement that follows are the same on every run. ``ValueError`` for a source without
    weights."""
    if source.weights is None:
        raise ValueError(f"{source.path} holds no safetensors weights")
    torch.manual_seed(seed)
    return hf_class(source.config).from_pretrained(str(source.weights), local_files_only=True,
                                                   use_safetensors=True)


#: Model types whose position ids start after the padding id (RoBERTa's convention): padding id + 1 of their
#: ``max_position_embeddings`` positions are never a real token's.
_POSITIONS_AFTER_PADDING = ("roberta", "xlm-roberta", "camembert", "longformer")


def _positions(config) -> int:
    """The longest sequence a configuration's positions take (its context), or sigprop's default length."""
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            if config.model_type in _POSITIONS_AFTER_PADDING:
                value -= int(getattr(config, "pad_token_id", 0) or 0) + 1
            return value
    return DEFAULT_SEQ_LEN


#: Files that say a folder holds a tokenizer.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.txt", "vocab.json")


def folder_tokenizer(source: HFSource):
    """The tokenizer saved with the model (``AutoTokenizer``, local files only), or ``None`` when its folder holds
    none. ``ValueError`` for one that ``transformers`` cannot read."""
    folder = source.path if source.path.is_dir() else source.path.parent
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        return None
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (ValueError, OSError, KeyError) as err:
        raise ValueError(f"--hf {source.path}: its tokenizer cannot be read "
                         f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None


def tokenizer_ids(tokenizer, batch_size: int, length: int, vocab_size: int, data=None, seed: int = 0) -> torch.Tensor:
    """``batch_size`` windows of ``length`` token ids of a corpus (default: the standard library's source; ``data``:
    your text files or folder) encoded by ``tokenizer`` file by file without special tokens, at offsets drawn from
    ``seed``. ``ValueError`` when the corpus is too short or an id is not below ``vocab_size``."""
    import numpy as np

    from ..data.corpus import corpus_files, read_texts

    want = batch_size * length * 8  # enough text that the windows are drawn from many places
    chunks, total = [], 0
    for text in read_texts(corpus_files(data)):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        chunks.append(np.asarray(ids, dtype=np.int64))
        total += len(ids)
        if total >= want:
            break
    stream = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    if len(stream) < length:
        raise ValueError(f"the corpus encodes to {len(stream)} tokens, fewer than one sequence of {length}")
    if int(stream.max()) >= vocab_size:
        raise ValueError(f"the folder's tokenizer gives id {int(stream.max())}, beyond the model's vocabulary of "
                         f"{vocab_size}")
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.randint(0, len(stream) - length + 1, (batch_size,), generator=gen).numpy()
    return torch.from_numpy(stream[offsets[:, None] + np.arange(length)[None, :]])


def hf_batch(source: HFSource, config, batch_size: int, data=None, seed: int = 0) -> tuple[object | None, str]:
    """(batch, what tokenised it) for measuring the model of ``source`` on text encoded by the tokenizer saved in its
    folder (the masked tokens then its own [MASK]): for a mapped family (``config``, its
    :class:`~sigprop.model.config.TransformerConfig`) sigprop's batch dict of that config, for any other a
    :class:`~sigprop.model.batch.Batch` of its head's objective (:func:`hf_token_batch`). ``(None, ...)`` when the
    folder holds no tokenizer: the caller then tokenises with sigprop's byte-level BPE."""
    tokenizer = folder_tokenizer(source)
    if tokenizer is None:
        return None, "sigprop's byte-level BPE of the model's vocabulary size (the folder holds no tokenizer)"
    said = f"the folder's tokenizer ({type(tokenizer).__name__}, {len(tokenizer)} tokens)"
    mask = tokenizer.mask_token_id
    if config is None:
        return hf_token_batch(source, batch_size, data, seed=seed, tokenizer=tokenizer), said
    from ..model.objective import make_batch

    if config.arch == "encoder" and mask is None:
        raise ValueError(f"--hf {source.path}: a masked LM whose tokenizer has no mask token")
    ids = tokenizer_ids(tokenizer, batch_size, config.seq_len, config.vocab_size, data, seed)
    gen = torch.Generator().manual_seed(seed)
    return make_batch(config, ids, generator=gen, **({} if mask is None else {"mask_id": int(mask)})), said


def hf_token_batch(source: HFSource, batch_size: int, data=None, synthetic: bool = False, seed: int = 0,
                   tokenizer=None) -> Batch:
    """A batch for a model of an unmapped family: ``batch_size`` sequences of min(128, its context) tokens of the
    default corpus (or ``data``; i.i.d. Zipf(1) tokens with ``synthetic``), tokenised with sigprop's BPE of the
    model's vocabulary size, with the targets of its head: the next token (causal LM) or 15% of the tokens masked
    (masked LM; sigprop's [MASK] id, or another of its special ids where the model's padding id is that one).
    ``ValueError`` for a model that is neither, or has no ``vocab_size``."""
    from ..data.mlm import causal_lm_labels, mask_tokens
    from ..measurement.adapters import head_of_class
    from ..model.objective import MASK_ID, N_SPECIAL

    cfg = source.config
    vocab = getattr(cfg, "vocab_size", None)
    if not isinstance(vocab, int) or vocab <= N_SPECIAL:
        raise ValueError(f"--hf {source.path}: a {cfg.model_type!r} model without a token vocabulary (vocab_size): "
                         "measure it from Python, sigprop.measure(model, batch)")
    head = head_of_class(hf_class(cfg))
    if head not in ("causal_lm", "masked_lm"):
        raise ValueError(f"--hf {source.path}: sigprop builds batches for causal and masked language models; this "
                         f"one is a {head.replace('_', ' ')}: measure it from Python, sigprop.measure(model, batch)")
    length = min(DEFAULT_SEQ_LEN, _positions(cfg))
    gen = torch.Generator().manual_seed(seed)
    if tokenizer is not None:
        ids = tokenizer_ids(tokenizer, batch_size, length, vocab, data, seed)
    elif synthetic:
        from ..data.zipf import zipf_tokens

        ids = zipf_tokens(batch_size, length, vocab - N_SPECIAL, generator=gen, first_id=N_SPECIAL)
    else:
        from ..data.batches import load_batch

        ids = load_batch(batch_size, length, path=data, vocab_size=vocab, seed=seed)
    if head == "causal_lm":
        return Batch(inputs=ids, labels=causal_lm_labels(ids))
    pad = getattr(cfg, "pad_token_id", None)  # a mask id the model takes for padding would hide the masked tokens
    mask_id = next(i for i in (MASK_ID, *range(MASK_ID + 1, N_SPECIAL)) if i != pad)
    if tokenizer is not None and tokenizer.mask_token_id is not None:
        mask_id = int(tokenizer.mask_token_id)
    masked, labels = mask_tokens(ids, mask_id, prob=0.15, generator=gen, vocab_size=vocab, random_low=N_SPECIAL)
    return Batch(inputs=masked, labels=labels)


def measure_hf(source: HFSource, batch, seeds: int = 1, seed0: int = 0, progress=None,
               config=None, theory: str | None = None, fresh: bool = False) -> Profile:
    """Measure the model of ``source`` on ``batch`` (module docstring): the saved weights once, or ``seeds`` fresh
    initialisations from ``seed0`` on, averaged.

    Args:
        source: the local model (:func:`read_hf_source`).
        batch: sigprop's batch dict of the mapped configuration, or any batch :func:`sigprop.measure` takes.
        seeds: fresh models measured when the folder holds no weights.
        seed0: the first of them.
        progress: called with 1 after each model.
        config: the mapped :class:`~sigprop.model.config.TransformerConfig`, the profile's config, so that
            ``sigprop compare --measured`` predicts it against this measurement; ``None`` for an unmapped family.
        theory: why the theory is not available (an unmapped family), recorded as ``meta["theory"]``.
        fresh: fresh initialisations of its configuration even where the folder holds weights.

    Returns:
        The measured profile; ``meta["hf_config"]`` keeps the Hugging Face configuration.
    """
    saved = source.weights is not None and not fresh
    seed_list = [seed0] if saved else list(range(seed0, seed0 + seeds))
    profiles = []
    for seed in seed_list:
        model = load_hf_model(source, seed) if saved else build_hf_model(source, seed)
        model.train()  # dropout on, as sigprop measures its own models
        profiles.append(measure(model, batch))
        if progress is not None:
            progress(1)
    from ..model.batches import batch_fingerprint

    read = Batch.from_any(batch)
    meta = {"seeds": seed_list, "tokens": int(read.inputs.numel()), "sequences": read.sequences,
            "batch_sha256": batch_fingerprint(read),
            "hf_source": str(Path(source.path).resolve()), "hf_weights": "saved" if saved else "initialised",
            "hf_config": source.config.to_dict(), "sites_from": profiles[0].meta.get("sites_from")}
    if theory is not None:
        meta["theory"] = theory
    meta["per_seed"] = per_seed_table(profiles, seed_list)  # slices of seeds measured apart merge exactly
    return average_profiles(profiles, {} if config is None else config.to_dict(), meta)
