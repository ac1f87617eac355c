"""Theory against measurement for one configuration: a real batch, the model measured over independently
initialised seeds, the prediction for the same batch, and their comparison. The CLI's ``predict`` / ``measure`` /
``compare`` are thin wrappers over these functions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .comparison import Comparison, compare
from .components.attention_sampled import DEFAULT_HEADS
from .model.config import TransformerConfig
from .model.objective import make_batch
from .model.transformer import Transformer
from .moments import GradMoments
from .profile import Profile
from .seed_average import average_profiles

__all__ = ["token_batch", "measure_seed", "measure_seeds", "measured_boundary", "predict_for_batch", "compare_config",
           "compare_steps", "image_batch", "config_batch", "with_batch_input_correlation", "batch_fingerprint",
           "check_same_batch", "GRAD_BOUNDARIES"]

GRAD_BOUNDARIES = ("measured", "theory")


def token_batch(config: TransformerConfig, batch_size: int = 8, data=None, seed: int = 0,
                synthetic: bool = False) -> dict:
    """A batch for ``config``'s objective: ``batch_size`` windows of ``config.seq_len`` real tokens from the corpus
    (default: the Python standard library's source; ``data``: a user's file or folder), tokenised with a BPE of
    ``config.vocab_size`` trained and cached locally, or i.i.d. Zipf(1) tokens with ``synthetic``; then masked-LM
    corruption (encoder) or next-token labels (decoder)."""
    if config.input != "tokens":
        raise ValueError("token_batch: this config takes image patches, not tokens")
    gen = torch.Generator().manual_seed(seed)
    if synthetic:
        from .data.zipf import zipf_tokens

        ids = zipf_tokens(batch_size, config.seq_len, config.vocab_size - 5, generator=gen, first_id=5)
    else:
        from .data.batches import load_batch

        ids = load_batch(batch_size, config.seq_len, path=data, vocab_size=config.vocab_size, seed=seed)
    return make_batch(config, ids, generator=gen)


def image_batch(config: TransformerConfig, batch_size: int = 8, seed: int = 0, synthetic: bool = False,
                data=None) -> dict:
    """A batch for a patch model of ``config``: ``batch_size`` of scikit-learn's digits (bundled, nothing
    downloaded; drawn at random from ``seed``), upsampled to ``config.image_size``, pixels scaled to unit mean
    square over the data set and copied to every channel, with their digit as the class
    (:func:`sigprop.data.digits.digits`, ``normalise="rms"``), or with ``synthetic`` i.i.d. uniform pixels of unit
    mean square and uniformly random classes. Kedia et al. App. H normalises images to about unit variance; keeping
    the pixels non-negative keeps the patches' inner products, hence the input token correlation the rules need,
    non-negative (standardised digits give about −0.007; App. H measures 0.46 for ImageNet). ``data``: your own
    images instead, a folder (subfolders as classes) or a ``.npy`` array (:func:`sigprop.data.images.read_images`).
    ``ValueError`` for a token model, a batch larger than the data set, or fewer classes than digits."""
    from .data.digits import N_DIGIT_CLASSES, N_DIGITS, digits

    if config.input != "patches":
        raise ValueError("image_batch: this config takes tokens, not image patches")
    gen = torch.Generator().manual_seed(seed)
    if data is not None:
        from .data.images import read_images

        images, labels = read_images(data, batch_size, config.image_size, config.channels, config.n_classes, gen)
        return make_batch(config, images, labels=labels)
    if synthetic:
        shape = (batch_size, config.channels, config.image_size, config.image_size)
        return make_batch(config, torch.rand(shape, generator=gen) * 3.0**0.5,  # E[u²] = 1 for u ~ U(0, √3)
                          labels=torch.randint(config.n_classes, (batch_size,), generator=gen))
    if config.n_classes < N_DIGIT_CLASSES:
        raise ValueError(f"the digits have {N_DIGIT_CLASSES} classes but the model has n_classes = {config.n_classes}: "
                         "set n_classes >= 10, or use synthetic images")
    if batch_size > N_DIGITS:
        raise ValueError(f"batch_size must be <= {N_DIGITS} (the digits data set)")
    images, labels = digits(count=batch_size, size=config.image_size, channels=config.channels, generator=gen,
                            normalise="rms")
    return make_batch(config, images, labels=labels)


def config_batch(config: TransformerConfig, batch_size: int = 8, data=None, seed: int = 0,
                 synthetic: bool = False) -> tuple[TransformerConfig, dict]:
    """(config, batch) for measuring and predicting ``config``: :func:`token_batch` for a token model,
    :func:`image_batch` for a patch model (``data``: a folder of images or a ``.npy`` array; default the bundled
    digits). A DSLM patch model without ``input_corr`` gets the one of this batch
    (:func:`sigprop.theory.patch_input_correlation`, Kedia et al. App. H: measured on the images, not assumed), so
    the returned config may differ from ``config`` in that field alone."""
    if config.input == "tokens":
        return config, token_batch(config, batch_size, data, seed, synthetic)
    if data is not None and synthetic:
        raise ValueError("--data and --synthetic exclude each other")
    batch = image_batch(config, batch_size, seed, synthetic, data)
    return with_batch_input_correlation(config, batch), batch


def with_batch_input_correlation(config: TransformerConfig, batch: dict) -> TransformerConfig:
    """``config`` with ``input_corr`` set from the batch's images when DSLM needs it and it is unset: a DSLM patch
    model's correlation schedule starts from its images' token correlation after the patch embedding
    (:func:`sigprop.theory.patch_input_correlation`, Kedia et al. App. H). Any other config comes back as it is."""
    if config.input != "patches" or config.init != "dslm" or config.input_corr is not None:
        return config
    import dataclasses

    from .theory import patch_input_correlation

    return dataclasses.replace(config, input_corr=patch_input_correlation(config, batch["inputs"]))


def batch_fingerprint(batch: dict) -> str:
    """SHA-256 of a batch's tensors (name, dtype, shape and values, in name order): a measurement records it so that
    a later comparison against it (:func:`compare_config` with ``measured``) can check it predicts the same batch."""
    import hashlib

    h = hashlib.sha256()
    for key in sorted(k for k, v in batch.items() if isinstance(v, torch.Tensor)):
        t = batch[key].detach().cpu().contiguous()
        h.update(f"{key}:{t.dtype}:{tuple(t.shape)};".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def _to(batch: dict, device) -> dict:
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}


def measure_seed(config: TransformerConfig, batch: dict, seed: int, device=None) -> Profile:
    """The measured profile of one model of ``config``, its weights drawn on the CPU from ``seed`` (identical on
    every device) and moved to ``device``, in training mode (dropout on, masks from ``torch.manual_seed(10_000 +
    seed)``), on ``batch`` (moved to ``device``; a no-op where it is already there)."""
    from .measurement import measure

    model = Transformer(config, generator=torch.Generator().manual_seed(seed))
    if device is not None:
        model, batch = model.to(device), _to(batch, device)
    model.train()
    torch.manual_seed(10_000 + seed)  # dropout masks
    return measure(model, batch)


def measure_seeds(config: TransformerConfig, batch: dict, seeds: int = 4, seed0: int = 0,
                  progress: Callable[[int], None] | None = None, device=None, per_seed: bool = False) -> Profile:
    """Measure ``seeds`` independently initialised models of ``config`` (seeds ``seed0`` … ``seed0 + seeds − 1``,
    :func:`measure_seed`) on ``batch`` and average their per-site statistics, correlations pooled as mean covariance
    over mean variance (:mod:`sigprop.seed_average`); ``meta`` holds the seeds, the devices and standard errors.
    ``device``: a torch device, or several (a comma-separated string or a list, :func:`sigprop.devices.parse_devices`),
    which then measure the seeds in parallel, one process each (:mod:`sigprop.seed_workers`), with the same result.
    ``ValueError`` for an unavailable device, before anything is measured. ``meta["batch_sha256"]``:
    :func:`batch_fingerprint` of ``batch``. ``per_seed``: keep every seed's rows (``meta["per_seed"]``), so that
    measurements of disjoint seeds made apart merge exactly (:func:`sigprop.seed_merge.merge_measurements`)."""
    from .devices import parse_devices
    from .validate import integer_value

    seeds, seed0 = integer_value(seeds, "seeds", 1), integer_value(seed0, "the first seed", 0)
    devices = parse_devices(device)
    seed_list = list(range(seed0, seed0 + seeds))
    if len(devices) > 1:
        from .seed_workers import measure_on_devices

        profiles = measure_on_devices(config, batch, seed_list, devices, progress)
    else:
        on_device = _to(batch, devices[0])
        profiles = []
        for s in seed_list:
            profiles.append(measure_seed(config, on_device, s, devices[0]))
            if progress is not None:
                progress(1)
    n_tok = int(batch["inputs"].numel()) if config.input == "tokens" else int(batch["inputs"].shape[0])
    meta = {"seeds": seed_list, "tokens": n_tok, "sequences": int(batch["inputs"].shape[0]),
            "batch_sha256": batch_fingerprint(batch), "devices": [str(d) for d in devices]}
    if per_seed:
        from .seed_merge import per_seed_table

        meta["per_seed"] = per_seed_table(profiles, seed_list)
    return average_profiles(profiles, config.to_dict(), meta)


def measured_boundary(measured: Profile) -> GradMoments:
    """The gradient boundary a measurement gives :func:`sigprop.predict` (``grad_top``): the variance and token
    correlation of the gradient at the last layer's output, the correlation clipped to [−1, 1]."""
    top = measured.site("layer")[-1]
    return GradMoments(var=top.grad_var, corr=float(np.clip(top.grad_corr, -1.0, 1.0)))


def predict_for_batch(config: TransformerConfig, batch: dict | None = None, grad_top: GradMoments | None = None,
                      batch_size: int = 1, progress: Callable[[int], None] | None = None,
                      attention_heads: int = DEFAULT_HEADS, token_resolved: bool | None = None,
                      attention_seed: int = 0, gradients: bool = True) -> Profile:
    """:func:`sigprop.predict` with the input boundary from the batch's token ids and the output-gradient boundary
    from its labels (theory), unless ``grad_top`` is given. ``progress``, ``attention_heads``, ``attention_seed``,
    ``token_resolved`` and ``gradients`` as in :func:`sigprop.predict` (by default the moments are token-resolved on
    the batch's own ids)."""
    from .theory import predict

    kw = {"grad_top": grad_top, "progress": progress, "attention_heads": attention_heads,
          "token_resolved": token_resolved, "attention_seed": attention_seed, "gradients": gradients}
    if batch is not None and batch.get("padding_mask") is not None:
        from .model.objective import PAD_ID

        kw["pad_id"] = PAD_ID
    if batch is None:
        return predict(config, batch_size=batch_size, **kw)
    if config.input == "patches":
        return predict(config, images=batch["inputs"], labels=batch["labels"], **kw)
    return predict(config, token_ids=batch["inputs"], labels=batch["labels"], segment_ids=batch.get("segment_ids"),
                   decoder_token_ids=batch.get("decoder_inputs"), **kw)


def compare_steps(config: TransformerConfig, grad_boundary: str = "measured",
                  token_resolved: bool | None = None, measured_given: bool = False) -> int:
    """The number of ``predict_progress`` steps :func:`compare_config` reports for a batch of ``config``'s input:
    the forward sweeps before measuring, then the whole prediction from the measured boundary (its cached forward
    sweep counted again, instantly), or one prediction from theory (:func:`sigprop.theory.prediction_steps`); one
    prediction when the measurement is given (``measured_given``)."""
    from .theory import prediction_steps

    steps = prediction_steps(config, True, token_resolved, labels_given=True)  # a batch's ids or images
    if grad_boundary == "measured" and not measured_given:
        steps += prediction_steps(config, True, token_resolved, labels_given=True, gradients=False)
    return steps


def check_same_batch(measured: Profile, batch: dict) -> None:
    """``ValueError`` unless ``batch`` is the batch ``measured`` was measured on (its ``meta["batch_sha256"]``;
    a measurement without one, written before it was recorded, is taken on trust) and ``measured`` is of one
    model's configuration at all (a ``config`` present)."""
    if not measured.config:
        raise ValueError("the measurement holds no model configuration")
    want = measured.meta.get("batch_sha256")
    if want is not None and want != batch_fingerprint(batch):
        raise ValueError("the batch rebuilt for the prediction is not the one measured (another corpus, tokenizer "
                         "cache or batch size?): pass the --data / --synthetic / --batch-size of the measurement")


def compare_config(config: TransformerConfig, batch: dict, seeds: int = 4, grad_boundary: str = "measured",
                   progress: Callable[[int], None] | None = None, device=None,
                   predict_progress: Callable[[int], None] | None = None, attention_heads: int = DEFAULT_HEADS,
                   token_resolved: bool | None = None,
                   measured: Profile | None = None) -> tuple[Profile, Profile, Comparison]:
    """Measure, predict and compare. ``grad_boundary="measured"`` takes the gradient moments at the last layer's
    output from the measurement (the paper's practice; stated in the prediction's meta), ``"theory"`` derives
    them from the loss (:func:`sigprop.theory.head_gradient_moments`). ``progress(k)``: k seeds measured;
    ``predict_progress(k)``: k layer sweeps of the prediction done (:func:`compare_steps` in all). With the
    measured boundary the forward sweeps run before the measurement (a model outside the rules' domain fails before
    minutes of measuring; the sampled attention draws and the token-resolved forward sweep are kept) and the
    backward sweeps after it. ``token_resolved`` as in :func:`sigprop.predict`; ``device`` (one or several) as in
    :func:`measure_seeds`. ``measured``: a measurement made before (e.g. on other machines, :func:`read_measured
    <sigprop.comparison.read_measured>`) of this ``config`` on this ``batch`` (:func:`check_same_batch`): nothing is
    measured and ``seeds``, ``device`` and ``progress`` are unused."""
    from .devices import parse_devices

    if grad_boundary not in GRAD_BOUNDARIES:
        raise ValueError(f"grad_boundary must be one of {', '.join(GRAD_BOUNDARIES)} (got {grad_boundary!r})")
    kw = {"attention_heads": attention_heads, "token_resolved": token_resolved, "progress": predict_progress}
    predicted = None
    if measured is None:
        device = parse_devices(device)  # a missing device stops the run before minutes of predicting
        # predict first: a model outside the rules' domain fails before minutes of measuring
        predicted = predict_for_batch(config, batch, gradients=grad_boundary == "theory", **kw)
        measured = measure_seeds(config, batch, seeds, progress=progress, device=device)
    elif measured.kind != "measured":
        raise ValueError(f"compare_config: measured must be a measured profile (got kind {measured.kind!r})")
    else:
        check_same_batch(measured, batch)
    if grad_boundary == "measured":
        predicted = predict_for_batch(config, batch, measured_boundary(measured), **kw)
        top_layer = measured.site("layer")[-1].layer
        predicted.meta["grad_source"] = f"measured at the output of layer {top_layer}: " + predicted.meta["grad_source"]
    elif predicted is None:
        predicted = predict_for_batch(config, batch, **kw)
    return predicted, measured, compare(predicted, measured)
