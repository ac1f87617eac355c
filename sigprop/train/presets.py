"""Named training runs sized for a 2-core CPU (a few minutes each), one per objective, and how ``--preset``,
``--config``, ``--set`` and ``--train-set`` combine into the two configs of a run."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .config import TrainConfig, apply_train_overrides, train_config_from_dict

__all__ = ["TrainPreset", "TRAIN_PRESETS", "resolve_train_configs"]

_SMALL = dict(n_layers=24, d_model=128, n_heads=4, seq_len=64, max_len=64, dropout=0.0, norm_position="pre",
              init="dslm")


@dataclass(frozen=True)
class TrainPreset:
    description: str
    model: dict
    train: dict


TRAIN_PRESETS = {
    "cpu-deep": TrainPreset("DeepScaleLM Pre-LN decoder, 24 layers of d = 128, next-token prediction on the standard "
                            "library's source: ~2 minutes on 2 CPU cores",
                            dict(arch="decoder", **_SMALL), dict(steps=400, batch_size=16, lr=2e-3, warmup_steps=40)),
    "cpu-encoder": TrainPreset("DeepScaleLM Post-LN encoder, 24 layers of d = 128, masked-LM",
                               dict(arch="encoder", **{**_SMALL, "norm_position": "post"}),
                               dict(steps=400, batch_size=16, lr=2e-3, warmup_steps=40)),
    "cpu-encdec": TrainPreset("DeepScaleLM Pre-LN encoder-decoder, 12 + 12 layers of d = 128, continuation of a "
                              "file's next 64 tokens",
                              dict(arch="encoder_decoder", **{**_SMALL, "n_layers": 12, "n_decoder_layers": 12}),
                              dict(steps=400, batch_size=16, lr=2e-3, warmup_steps=40)),
    "cpu-vit": TrainPreset("DeepScaleLM Pre-LN ViT, 24 layers of d = 128, classifying the digits (64 patches of 4 × 4)",
                           dict(input="patches", image_size=32, patch_size=4, channels=1, n_classes=10,
                                **{**_SMALL, "seq_len": 64}),
                           dict(steps=400, batch_size=32, lr=1e-3, warmup_steps=40)),
}


def _read_json(path) -> dict:
    from ..core.jsonio import read_config_json

    data = read_config_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def _split_file(data: dict, path) -> tuple[dict, dict]:
    """(model fields, training fields) of a ``--config`` file: a run's ``run.json`` or any JSON with
    ``model_config`` / ``train_config``, a profile's (``config``), or a flat object of either config's fields."""
    if "model_config" in data or "train_config" in data:
        return dict(data.get("model_config") or {}), dict(data.get("train_config") or {})
    if isinstance(data.get("config"), dict):
        return dict(data["config"]), {}
    train_names = {f.name for f in fields(TrainConfig)}
    train = {k: v for k, v in data.items() if k in train_names}
    model = {k: v for k, v in data.items() if k not in train_names}
    return model, train


def resolve_train_configs(preset: str | None = None, config_files=(), overrides=(), train_overrides=()):
    """(TransformerConfig, TrainConfig): a training preset (:data:`TRAIN_PRESETS`) or a model preset
    (:data:`sigprop.model.presets.PRESETS`, with the default training), then each ``--config`` file's fields over
    it, then ``--set`` on the model and ``--train-set`` on the training. ``ValueError`` naming what is wrong."""
    from ..model.config import TransformerConfig, apply_overrides, config_from_dict
    from ..model.presets import PRESETS

    model_fields, train_fields = {}, {}
    if preset is not None:
        if preset in TRAIN_PRESETS:
            model_fields, train_fields = dict(TRAIN_PRESETS[preset].model), dict(TRAIN_PRESETS[preset].train)
        elif preset in PRESETS:
            model_fields = PRESETS[preset].config().to_dict()
        else:
            raise ValueError(f"unknown preset {preset!r}; training presets: {', '.join(TRAIN_PRESETS)}; model "
                             f"presets: {', '.join(PRESETS)}")
    for path in config_files or ():
        model_part, train_part = _split_file(_read_json(path), path)
        model_fields.update(model_part)
        train_fields.update(train_part)
    model = config_from_dict(model_fields) if model_fields else TransformerConfig()
    train = train_config_from_dict(train_fields) if train_fields else TrainConfig()
    return apply_overrides(model, list(overrides or ())), apply_train_overrides(train, train_overrides)
