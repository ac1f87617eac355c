"""``sigprop doctor``'s model argument (:func:`resolve_model`) and its self-contained HTML report
(:func:`write_doctor_html`; the diagnosis itself is :mod:`sigprop.analysis.doctor`): the verdict, the findings, the
recommendation with the command that applies it, the current and the fixed model's profiles as figures embedded as PNG
data (no file beside it, no script, no network), and the agreement of theory and measurement."""

from __future__ import annotations

import base64
import html
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..analysis.doctor import SavedModel
from ..core.jsonio import write_text_atomic
from ..model.config import TransformerConfig

__all__ = ["DoctorTarget", "resolve_model", "saved_hf_model", "saved_run_model", "write_doctor_html"]

_STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}.bad{color:#b00020}.ok{color:#1b5e20}
code,pre{background:#f4f4f4;padding:.1em .3em}img{max-width:100%;border:1px solid #eee}"""


@dataclass(frozen=True)
class DoctorTarget:
    """What ``sigprop doctor MODEL`` diagnoses: the configuration, where it came from, its name, and the model with
    its own weights when MODEL holds some (and ``--fresh`` was not given)."""

    config: TransformerConfig | None
    source: str
    name: str
    saved: SavedModel | None = None
    theory: str | None = None  # why there is no theory: a Hugging Face model whose configuration is not mapped
    hf_path: Path | None = None  # the Hugging Face folder or config.json

    def diagnose(self, seeds: int, progress=None, spread: bool = False):
        """The :class:`~sigprop.analysis.doctor.DoctorReport` of this model: :func:`~sigprop.analysis.doctor.doctor`
        (``spread``: with one model's gradient interval), or for a model without a theory
        :func:`~sigprop.analysis.doctor.doctor_measured` (the saved model once, or ``seeds`` fresh ones, on a batch
        built from its configuration; ``ValueError`` with ``spread``, a prediction)."""
        from ..analysis.doctor import doctor, doctor_measured

        if self.config is not None:
            return doctor(self.config, self.source, seeds, progress=progress, saved=self.saved, spread=spread)
        if spread:
            raise ValueError(f"--spread predicts the seed-to-seed spread, and there is no theory: {self.theory}")
        from ..hf.measure import build_hf_model, hf_batch, hf_token_batch, load_hf_model, read_hf_source

        source = read_hf_source(self.hf_path)
        saved = source.weights is not None and self.saved is not None
        if not saved and seeds == 0:
            raise ValueError(f"--seeds 0 asks for theory only, and there is none: {self.theory}")
        batch, tokenised = hf_batch(source, None, 4)  # the folder's own tokenizer, where it holds one
        batch = hf_token_batch(source, 4) if batch is None else batch
        if saved:
            return doctor_measured(lambda seed: load_hf_model(source, seed), batch, [0],
                                   f"{self.saved.describe}, on text tokenised by {tokenised}", self.theory,
                                   progress=progress)
        return doctor_measured(lambda seed: build_hf_model(source, seed), batch, list(range(seeds)), "fresh seeds",
                               self.theory, progress=progress)


def saved_hf_model(folder: Path) -> SavedModel:
    """The Hugging Face model saved in ``folder`` (safetensors), measured as it is; its plan read from its weights."""

    def load():
        from ..hf.measure import load_hf_model, read_hf_source

        return load_hf_model(read_hf_source(folder))

    def read_plan(model, config):
        from ..hf.weights import read_hf_plan

        return read_hf_plan(model, config)

    def batch(config, batch_size):
        from ..hf.measure import hf_batch, read_hf_source

        return hf_batch(read_hf_source(folder), config, batch_size)

    return SavedModel(f"the saved weights of {folder}", load, read_plan, batch,
                      where={"kind": "hf", "path": str(Path(folder).resolve())})


def saved_run_model(run_dir: Path) -> SavedModel:
    """The newest checkpoint of a training run, measured as it is; its plan read from its weights."""

    def load():
        from ..train.run_dir import trained_model

        return trained_model(run_dir, "diagnose")[0]  # its config is the run's: --set with weights is refused

    def read_plan(model, config):
        from ..model.init import InitPlan

        return InitPlan.from_model(model, strict=False)

    from ..train.checkpoint import latest_checkpoint

    newest = latest_checkpoint(run_dir)
    return SavedModel(f"the newest checkpoint of {run_dir}", load, read_plan,
                      where={"kind": "run", "path": str(Path(run_dir).resolve()),
                             "checkpoint": None if newest is None else newest.name})


def _cached_hf_model(model: str, presets) -> Path:
    """The snapshot folder of the model id ``model`` in the local Hugging Face cache; ``ValueError`` (one line) when
    it is neither there nor anything else doctor takes."""
    neither = f"MODEL: {model!r} is neither a preset ({', '.join(presets)}), an existing path"
    try:
        from ..hf.measure import NotInCache, resolve_hf_location
    except ImportError:
        raise ValueError(f"{neither} nor (without the extra `hf`) a Hugging Face model id") from None
    try:
        return resolve_hf_location(model)
    except NotInCache as err:
        raise ValueError(f"{neither} nor a model in the local Hugging Face cache ({err.cache}); sigprop downloads "
                         "nothing") from None
    except ValueError:
        raise ValueError(f"{neither} nor a Hugging Face model id") from None


def resolve_model(model: str, overrides=(), fresh: bool = False) -> DoctorTarget:
    """What ``sigprop doctor MODEL`` diagnoses (:class:`DoctorTarget`): a preset name, a training run's folder (its
    ``run.json``; its newest checkpoint's weights), a Hugging Face model folder (its safetensors weights), a model id
    in the local Hugging Face cache, or a ``config.json`` (a ``model_type`` field; mapped, with what the mapping
    leaves out as a warning), or a sigprop config JSON; ``overrides`` (``key=value``) apply to sigprop configs only;
    ``fresh``: a freshly initialised model of the configuration even where MODEL holds weights. ``ValueError`` (one
    line) otherwise."""
    from ..core.jsonio import read_config_json
    from ..model.presets import PRESETS, resolve_config

    no_weights = ("--fresh applies to a model with saved weights (a training run's folder or a Hugging Face model "
                  "folder); {} has none: it is always diagnosed freshly initialised")
    if model in PRESETS:
        if fresh:
            raise ValueError(no_weights.format(f"the preset {model!r}"))
        return DoctorTarget(resolve_config(model, None, overrides)[0], "sigprop", model)
    path, name = Path(model), None
    if not path.exists():
        path, name = _cached_hf_model(model, PRESETS), model  # a model id: named as the user named it
    hf_file = path / "config.json" if path.is_dir() else path
    if path.is_dir() and (path / "run.json").exists():
        from ..model.config import apply_overrides, config_from_dict
        from ..train.checkpoint import latest_checkpoint
        from ..train.run_dir import read_run

        config = apply_overrides(config_from_dict(read_run(path)["model_config"]), overrides)
        if overrides and not fresh and latest_checkpoint(path) is not None:
            raise ValueError("--set changes the model, so the run's saved weights do not fit it: add --fresh to "
                             "diagnose a freshly initialised model of the changed configuration")
        saved = None if fresh or latest_checkpoint(path) is None else saved_run_model(path)
        return DoctorTarget(config, "run", path.name, saved)
    if hf_file.is_file() and hf_file.suffix == ".json":
        data = read_config_json(hf_file)
        if isinstance(data, dict) and "model_type" in data:
            if overrides:
                raise ValueError("--set applies to sigprop configs; a Hugging Face config is mapped as it is")
            from ..hf.config_map import FAMILIES, from_hf, not_mapped_reason
            from ..hf.measure import read_hf_source

            folder = hf_file.parent
            weights = path.is_dir() and read_hf_source(path).weights is not None
            saved = saved_hf_model(folder) if weights and not fresh else None
            name = name or folder.name
            if data["model_type"] not in FAMILIES:
                return DoctorTarget(None, "hf", name, saved, not_mapped_reason(data["model_type"]), path)
            try:
                return DoctorTarget(from_hf(str(folder)), "hf", name, saved, hf_path=path)
            except ValueError as err:  # a mapped family whose configuration uses what the mapping cannot state
                return DoctorTarget(None, "hf", name, saved, f"its theory is not available: {err}", path)
        if not path.is_dir():
            if fresh:
                raise ValueError(no_weights.format(f"the config file {path}"))
            return DoctorTarget(resolve_config(None, path, overrides)[0], "sigprop", path.stem)
    raise ValueError(f"MODEL: {path} holds no run.json, no config.json and is no config file")


def _figure(predicted, measured, title: str) -> str:
    from .profiles import plot_profiles

    with tempfile.TemporaryDirectory() as tmp:
        path = plot_profiles(Path(tmp) / "profile.png", predicted, measured, title=title)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'


def _findings(diagnosis, checks=()) -> str:
    lines = [(f.flagged, f.describe()) for f in diagnosis.findings] + [(c.flagged, f"{c.name}: {c.message}")
                                                                        for c in checks]
    rows = "".join(f'<tr><td class="{"bad" if flagged else "ok"}">{"flagged" if flagged else "fine"}</td>'
                   f"<td>{html.escape(text)}</td></tr>" for flagged, text in lines)
    return f"<table><tr><th></th><th>finding ({html.escape(diagnosis.kind)})</th></tr>{rows}</table>"


def _agreement(errors: dict, noise: dict) -> str:
    def cell(v):
        return f"{100 * v:.2f}%" if v is not None and v == v else "–"
    rows = "".join(f"<tr><td>{html.escape(q)}</td><td>{cell(v)}</td><td>{cell(noise.get(q))}</td></tr>"
                   for q, v in errors.items())
    return ("<table><tr><th>quantity</th><th>median relative error, theory vs measurement</th>"
            "<th>the measurement's median relative standard error (noise alone gives ~0.67× it)</th></tr>"
            f"{rows}</table>")


def interval_lines(report) -> list[str]:
    """The report's one-model gradient intervals (``spread``) as sentences: the current model's, and the fixed
    one's with how much the fix narrows it."""
    from ..analysis.doctor import narrowing_text

    current, fixed = report.intervals.get("current"), report.intervals.get("fixed")
    lines = []
    if current is not None:
        lines.append(f"predicted spread: {current.describe()}")
    if fixed is not None:
        lines.append(narrowing_text(current, fixed) if current is not None else
                     f"the fixed model: {fixed.describe()}")
    return lines


def _intervals(report) -> list[str]:
    lines = interval_lines(report)
    return ["<h2>One model, not the average</h2>", *(f"<p>{html.escape(line)}.</p>" for line in lines)] if lines else []


def write_doctor_html(report, path, name: str) -> Path:
    """Write ``report`` (a :class:`~sigprop.analysis.doctor.DoctorReport`) of the model called ``name`` as one HTML
    file at ``path``, atomically."""
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>sigprop doctor: {e(name)}</title>"
             f"<style>{_STYLE}</style></head><body>",
             f"<h1>sigprop doctor: {e(name)}</h1>",
             f'<p class="{"bad" if report.flagged else "ok"}"><b>{e(report.verdict)}</b></p>',
             "<p>" + (f"theory not available: {e(report.theory)}; " if report.config is None else
                      f"{report.config.total_layers} layers, d = {report.config.d_model}, "
                      f"{e(report.config.norm_position)}-LN, init {e(report.config.init)}; ")
             + ("theory only" if report.seeds == 0 else
                f"measured: {e(report.measured_what)}" + (f" ({report.seeds})" if report.measured_what ==
                                                          "fresh seeds" else "")
                + ("" if report.predicted is None else "; theory beside measurement"))
             + ".</p>",
             *(f'<p class="bad">theory approximate: {e(a)}</p>' for a in report.approximations),
             "<h2>Findings</h2>", _findings(report.diagnosis, report.checks)]
    rec = report.recommendation
    if rec is not None:
        parts += ["<h2>Recommendation</h2><ul>", *(f"<li>{e(r)}</li>" for r in rec.reasons), "</ul>",
                  f"<p>Apply it: <code>{e(rec.apply)}</code></p>",
                  "<p>Trained:</p><ul>", *(f"<li>{e(t)}</li>" for t in rec.evidence), "</ul>"]
        if report.fixed_diagnosis is not None:
            still = report.fixed_diagnosis.flagged or any(c.flagged for c in report.fixed_checks)
            verdict = "still flagged" if still else "nothing flagged"
            parts += [f"<p>The fixed model: <b>{verdict}</b>.</p>",
                      _findings(report.fixed_diagnosis, report.fixed_checks)]
    elif report.no_fix is not None:
        parts.append(f"<h2>Recommendation</h2><p>None: {e(report.no_fix)}.</p>")
    else:
        parts.append("<h2>Recommendation</h2><p>None needed.</p>")
    parts += _intervals(report)
    parts += ["<h2>The current model</h2>", _figure(report.predicted, report.measured, f"{name}: current")]
    if report.agreement.get("current"):
        parts.append(_agreement(report.agreement["current"], report.noise.get("current", {})))
    if report.fixed_predicted is not None:
        parts += ["<h2>The fixed model</h2>", _figure(report.fixed_predicted, report.fixed_measured, f"{name}: fixed")]
        if report.agreement.get("fixed"):
            parts.append(_agreement(report.agreement["fixed"], report.noise.get("fixed", {})))
    parts.append("<p>Lines: theory; points: measurement (±1 standard error over seeds). Written by sigprop.</p>"
                 "</body></html>")
    return write_text_atomic(path, "\n".join(parts))
