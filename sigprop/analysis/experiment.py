"""Theory against measurement for one configuration: a real batch, the model measured over independently
initialised seeds, the prediction for the same batch, and their comparison. The CLI's ``predict`` / ``measure`` /
``compare`` are thin wrappers over these functions."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch

from ..components.draws import DEFAULT_HEADS
from ..core.moments import GradMoments
from ..core.profile import Profile
from ..measurement.seeds import measure_seeds
from ..model.batch import Batch
from ..model.batches import batch_fingerprint, image_batch, token_batch
from ..model.config import TransformerConfig
from ..model.objective import PAD_ID
from ..theory.boundaries import patch_input_correlation
from ..theory.predict import Prediction
from .comparison import Comparison, compare

__all__ = ["measured_boundary", "batch_prediction", "predict_for_batch", "compare_config",
           "config_batch", "stored_setup",
           "with_batch_input_correlation", "check_same_batch", "GRAD_BOUNDARIES"]


GradBoundary = Literal["measured", "theory"]
GRAD_BOUNDARIES: tuple[GradBoundary, ...] = get_args(GradBoundary)


def config_batch(config: TransformerConfig, batch_size: int = 8, data=None, seed: int = 0,
                 synthetic: bool = False) -> tuple[TransformerConfig, dict]:
    """(config, batch) for measuring and predicting ``config``: :func:`token_batch` for a token model,
    :func:`image_batch` for a patch model (``data``: a folder of images or a ``.npy`` array; default the bundled
    digits). A DSLM patch model without ``input_corr`` gets the one of this batch
    (:func:`sigprop.theory.boundaries.patch_input_correlation`, Kedia et al. App. H: measured on the images, not
    assumed), so the returned config may differ from ``config`` in that field alone."""
    if config.input == "tokens":
        return config, token_batch(config, batch_size, data, seed, synthetic)
    if data is not None and synthetic:
        raise ValueError("--data and --synthetic exclude each other")
    batch = image_batch(config, batch_size, seed, synthetic, data)
    return with_batch_input_correlation(config, batch), batch


def with_batch_input_correlation(config: TransformerConfig, batch: Batch | dict) -> TransformerConfig:
    """``config`` with ``input_corr`` set from the batch's images when DSLM (or ``init="auto"``) needs it and it is
    unset: a DSLM patch model's correlation schedule starts from its images' token correlation after the patch
    embedding (:func:`sigprop.theory.boundaries.patch_input_correlation`, Kedia et al. App. H). Any other config
    comes back as it is."""
    if config.input != "patches" or not config.scheme.needs_input_corr or config.input_corr is not None:
        return config
    import dataclasses

    return dataclasses.replace(config, input_corr=patch_input_correlation(config, Batch.from_any(batch).inputs))


def measured_boundary(measured: Profile) -> GradMoments:
    """The gradient boundary a measurement gives :func:`sigprop.predict` (``grad_top``): the variance and token
    correlation of the gradient at the last layer's output, the correlation clipped to [−1, 1]."""
    top = measured.site("layer")[-1]
    return GradMoments(var=top.grad_var, corr=float(np.clip(top.grad_corr, -1.0, 1.0)))


def batch_prediction(model_or_config, batch: Batch | dict | None = None, batch_size: int = 1,
                     attention_heads: int = DEFAULT_HEADS, token_resolved: bool | None = None,
                     attention_seed: int = 0, plan=None) -> Prediction:
    """The :class:`~sigprop.theory.predict.Prediction` of a model (or config) on ``batch``: the input boundary from
    the batch's token ids (or images), the loss's gradient from its labels; without a batch, from theory over
    ``batch_size`` sequences. Hold it to predict under several gradient boundaries with one forward sweep."""
    kw = {"plan": plan, "attention_heads": attention_heads, "token_resolved": token_resolved,
          "attention_seed": attention_seed}
    config = model_or_config if isinstance(model_or_config, TransformerConfig) else model_or_config.config
    if batch is None:
        return Prediction(model_or_config, batch_size=batch_size, **kw)
    batch = Batch.from_any(batch)
    if config.input == "patches":
        return Prediction(model_or_config, images=batch.inputs, labels=batch.labels, **kw)
    ids, decoder_ids = batch.inputs, batch.decoder_inputs
    if batch.padding_mask is not None or batch.decoder_padding_mask is not None:
        ids, decoder_ids, kw["pad_id"] = _padding_as_ids(batch, config.vocab_size)
    return Prediction(model_or_config, token_ids=ids, labels=batch.labels, segment_ids=batch.segment_ids,
                      decoder_token_ids=decoder_ids, **kw)


def _padding_as_ids(batch: Batch, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """The batch's token ids with every padded position (False in its padding masks) set to one id of the
    vocabulary that no real token has (sigprop's [PAD] where free), and that id: the theory reads padding from the
    ids, whatever id the batch's tokenizer pads with. ``ValueError`` when every id occurs among the real tokens."""
    pairs = [(batch.inputs, batch.padding_mask), (batch.decoder_inputs, batch.decoder_padding_mask)]
    real = torch.cat([ids[mask.bool()] if mask is not None else ids.reshape(-1)
                      for ids, mask in pairs if ids is not None])
    taken = set(torch.unique(real).tolist())
    free = PAD_ID if PAD_ID not in taken else next((i for i in range(vocab_size) if i not in taken), None)
    if free is None:
        raise ValueError(f"every id of the vocabulary ({vocab_size}) occurs among the batch's real tokens: none is "
                         "left to mark its padding for the theory; predict on a batch with fewer distinct tokens")
    pad = free
    out = [ids if ids is None or mask is None else torch.where(mask.bool(), ids, torch.full_like(ids, pad))
           for ids, mask in pairs]
    return out[0], out[1], pad


def predict_for_batch(config: TransformerConfig, batch: Batch | dict | None = None, grad_top: GradMoments | None = None,
                      batch_size: int = 1, progress: Callable[[int], None] | None = None,
                      attention_heads: int = DEFAULT_HEADS, token_resolved: bool | None = None,
                      attention_seed: int = 0, gradients: bool = True) -> Profile:
    """:func:`sigprop.predict` with the input boundary from the batch's token ids and the output-gradient boundary
    from its labels (theory), unless ``grad_top`` is given (:func:`batch_prediction`). ``progress``,
    ``attention_heads``, ``attention_seed``, ``token_resolved`` and ``gradients`` as in :func:`sigprop.predict` (by
    default the moments are token-resolved on the batch's own ids)."""
    prediction = batch_prediction(config, batch, batch_size, attention_heads, token_resolved, attention_seed)
    return prediction.profile(grad_top, gradients, progress)


def check_same_batch(measured: Profile, batch: Batch | dict) -> None:
    """``ValueError`` unless ``batch`` is the batch ``measured`` was measured on (its ``meta["batch_sha256"]``;
    a measurement without one, written before it was recorded, is taken on trust) and ``measured`` is of one
    model's configuration at all (a ``config`` present)."""
    if not measured.config:
        raise ValueError("the measurement holds no model configuration")
    want = measured.meta.get("batch_sha256")
    if want is not None and want != batch_fingerprint(batch):
        raise ValueError("the batch rebuilt for the prediction is not the one measured (another corpus, tokenizer "
                         "cache or batch size?): pass the --data / --synthetic / --batch-size of the measurement")


def compare_config(config: TransformerConfig, batch: Batch | dict, seeds: int = 4,
                   grad_boundary: GradBoundary = "measured", progress: Callable[[int], None] | None = None, device=None,
                   predict_progress: Callable[[int], None] | None = None, attention_heads: int = DEFAULT_HEADS,
                   token_resolved: bool | None = None, measured: Profile | None = None,
                   prediction: Prediction | None = None, spread: bool = False) -> tuple[Profile, Profile, Comparison]:
    """Measure, predict and compare. ``grad_boundary="measured"`` takes the gradient moments at the last layer's
    output from the measurement (the paper's practice; stated in the prediction's meta), ``"theory"`` derives
    them from the loss (:func:`sigprop.theory.boundaries.head_gradient_moments`). ``progress(k)``: k seeds measured;
    ``predict_progress(k)``: k layer sweeps of the prediction done (``prediction.steps(spread=spread)`` in all, counted
    before any sweep ran). With the
    measured boundary the forward sweeps run before the measurement (a model outside the rules' domain fails before
    minutes of measuring; the sampled attention draws and the token-resolved forward sweep are kept) and the backward
    sweeps after it. ``token_resolved`` as in :func:`sigprop.predict`; ``device`` (one or several) as in
    :func:`measure_seeds`. ``measured``: a measurement made before (e.g. on other machines, :func:`read_measured
    <sigprop.analysis.comparison.read_measured>`) of this ``config`` on this ``batch`` (:func:`check_same_batch`):
    nothing is measured and ``seeds``, ``device`` and ``progress`` are unused. ``prediction``: the
    :func:`batch_prediction` of this config and batch, when the caller holds it already. ``spread``: predict the
    seed-to-seed spread too (:func:`sigprop.predict`), so that :func:`~sigprop.analysis.comparison.compare` judges
    the measured seed means against its band."""
    from ..core.devices import parse_devices

    if grad_boundary not in GRAD_BOUNDARIES:
        raise ValueError(f"grad_boundary must be one of {', '.join(GRAD_BOUNDARIES)} (got {grad_boundary!r})")
    if measured is not None and measured.kind != "measured":
        raise ValueError(f"compare_config: measured must be a measured profile (got kind {measured.kind!r})")
    if measured is not None:
        check_same_batch(measured, batch)
    if prediction is None:
        prediction = batch_prediction(config, batch, attention_heads=attention_heads, token_resolved=token_resolved)
    predicted = None
    if measured is None:
        device = parse_devices(device)  # a missing device stops the run before minutes of predicting
        # predict first: a model outside the rules' domain fails before minutes of measuring
        if grad_boundary == "theory":
            predicted = prediction.profile(progress=predict_progress, spread=spread)
        else:
            prediction.forward(predict_progress)
        measured = measure_seeds(config, batch, seeds, progress=progress, device=device)
    if grad_boundary == "measured":
        predicted = prediction.profile(measured_boundary(measured), progress=predict_progress, spread=spread)
        top_layer = measured.site("layer")[-1].layer
        predicted.meta["grad_source"] = f"measured at the output of layer {top_layer}: " + predicted.meta["grad_source"]
    elif predicted is None:
        predicted = prediction.profile(progress=predict_progress, spread=spread)
    return predicted, measured, compare(predicted, measured)


def stored_setup(path, batch_size: int | None = None, data=None, synthetic: bool = False):
    """(config, measured profile, batch) for comparing the theory against the measurement stored at ``path`` (a
    ``sigprop measure --json`` or ``compare --json`` file): the file's configuration, and its batch rebuilt from the
    size and source the file records unless ``batch_size`` / ``data`` / ``synthetic`` say otherwise.
    ``ValueError`` for a file that is not a measurement sigprop wrote, or that does not say its batch size."""
    from ..data.corpus import PYTHON_CORPUS
    from ..model.config import config_from_dict
    from .comparison import read_measured

    measured = read_measured(path)
    if not measured.config:
        raise ValueError(f"{path}: a measurement without a configuration sigprop maps, so without a theory"
                         f"{': ' + str(measured.meta['theory']) if measured.meta.get('theory') else ''}")
    config = config_from_dict(measured.config)
    if batch_size is None:
        batch_size = measured.meta.get("sequences") or int(measured.meta.get("tokens", 0)) // config.seq_len or None
    if batch_size is None:
        raise ValueError(f"{path} does not say how many sequences were measured: pass --batch-size")
    source = measured.meta.get("batch_source", "default")
    if data is None and not synthetic:  # "stdlib": the default corpus, as files written before said
        builtin = source in ("default", "stdlib", "synthetic")
        synthetic, data = source == "synthetic", (None if builtin else source if source == PYTHON_CORPUS else
                                                  Path(source))
    if str(measured.meta.get("tokenizer", "")).startswith("the folder's tokenizer") and not synthetic:
        from ..hf.measure import hf_batch, read_hf_source  # a Hugging Face folder's own tokenizer made the batch

        batch, _ = hf_batch(read_hf_source(measured.meta["hf_source"]), config, int(batch_size), data)
        check_same_batch(measured, batch)
        return config, measured, batch
    config, batch = config_batch(config, int(batch_size), data, 0, synthetic)
    check_same_batch(measured, batch)
    return config, measured, batch
