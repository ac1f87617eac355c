"""``sigprop measure --hf``: a Hugging Face model from a local folder (or a ``config.json``) measured through sigprop.

A folder with safetensors weights is one trained (or saved) model: it is loaded once and measured as it is. A
``config.json`` alone (or a folder without weights) is a model at initialisation: each seed builds it from the config
under ``torch.manual_seed(seed)`` (Hugging Face's own ``_init_weights``), and the seeds are averaged as for sigprop's
models. Pickled weights (``pytorch_model.bin``) are never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.profile import Profile
from ..measurement.average import average_profiles
from ..measurement.hooks import measure
from .config_map import FAMILIES

__all__ = ["HFSource", "read_hf_source", "load_hf_model", "measure_hf"]

#: The model class each family is measured as (its pre-training objective: causal or masked LM).
_CLASSES = {"gpt2": "AutoModelForCausalLM", "llama": "AutoModelForCausalLM", "bert": "AutoModelForMaskedLM"}


@dataclass(frozen=True)
class HFSource:
    """A local Hugging Face model: its configuration and, where the folder holds safetensors weights, the folder."""

    config: object
    weights: Path | None
    path: Path


def read_hf_source(path) -> HFSource:
    """Read ``path``: a folder with ``config.json`` (and maybe ``*.safetensors`` weights) or a ``config.json`` file.
    ``ValueError`` naming the problem (no config, pickled weights only, an unmapped model type)."""
    import transformers

    path = Path(path)
    folder = path if path.is_dir() else path.parent
    config_file = path if path.is_file() else path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"--hf {path}: no config.json (give a local model folder or its config.json)")
    config = transformers.AutoConfig.from_pretrained(str(config_file), local_files_only=True)
    if getattr(config, "model_type", None) not in FAMILIES:
        raise ValueError(f"--hf {path}: model_type {getattr(config, 'model_type', None)!r} is not mapped; supported: "
                         f"{', '.join(FAMILIES)}")
    weights = None
    if path.is_dir():
        if any(folder.glob("*.safetensors")):
            weights = folder
        elif any(folder.glob("*.bin")) or any(folder.glob("*.pt")):
            raise ValueError(f"--hf {path}: only pickled weights (.bin / .pt), which sigprop never loads; save the "
                             "model with safe_serialization=True (safetensors)")
    return HFSource(config=config, weights=weights, path=path)


def _model_class(config):
    import transformers

    return getattr(transformers, _CLASSES[FAMILIES[config.model_type]])


def load_hf_model(source: HFSource):
    """The model saved in ``source``'s folder (safetensors only, nothing downloaded), as the class of its family's
    pre-training objective (causal or masked LM). ``ValueError`` for a source without weights."""
    if source.weights is None:
        raise ValueError(f"{source.path} holds no safetensors weights")
    return _model_class(source.config).from_pretrained(str(source.weights), local_files_only=True,
                                                       use_safetensors=True)


def measure_hf(source: HFSource, batch: dict, seeds: int = 1, seed0: int = 0, progress=None,
               config=None) -> Profile:
    """Measure the model of ``source`` on ``batch`` (module docstring): the saved weights once, or ``seeds`` fresh
    initialisations from ``seed0`` on, averaged. The profile's config is ``config`` (the mapped
    :class:`~sigprop.model.config.TransformerConfig`, default :func:`~sigprop.hf.config_map.from_hf` of the source),
    so that ``sigprop compare --measured`` predicts it against this measurement; ``meta["hf_config"]`` keeps the
    Hugging Face configuration."""
    if config is None:
        from .config_map import map_hf_config

        config = map_hf_config(source.config).config
    cls = _model_class(source.config)
    seed_list = [seed0] if source.weights is not None else list(range(seed0, seed0 + seeds))
    profiles = []
    for seed in seed_list:
        if source.weights is not None:
            model = load_hf_model(source)
        else:
            torch.manual_seed(seed)
            model = cls.from_config(source.config)
        model.train()  # dropout on, as sigprop measures its own models
        profiles.append(measure(model, batch))
        if progress is not None:
            progress(1)
    meta = {"seeds": seed_list, "tokens": int(batch["inputs"].numel()), "sequences": int(batch["inputs"].shape[0]),
            "hf_source": str(source.path), "hf_weights": "saved" if source.weights is not None else "initialised",
            "hf_config": source.config.to_dict()}
    return average_profiles(profiles, config.to_dict(), meta)
