"""``sigprop doctor``'s model argument (:func:`resolve_model`) and its self-contained HTML report
(:func:`write_doctor_html`; the diagnosis itself is :mod:`sigprop.analysis.doctor`): the verdict, the findings, the
recommendation with the command that applies it, the current and the fixed model's profiles as figures embedded as PNG
data (no file beside it, no script, no network), and the agreement of theory and measurement."""

from __future__ import annotations

import base64
import html
import tempfile
from pathlib import Path

from ..core.jsonio import write_text_atomic
from ..model.config import TransformerConfig

__all__ = ["resolve_model", "write_doctor_html"]

_STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}.bad{color:#b00020}.ok{color:#1b5e20}
code,pre{background:#f4f4f4;padding:.1em .3em}img{max-width:100%;border:1px solid #eee}"""


def resolve_model(model: str, overrides=()) -> tuple[TransformerConfig, str, str]:
    """(config, source, name) of ``sigprop doctor MODEL``: a preset name, a training run's folder (its
    ``run.json``), a Hugging Face model folder or ``config.json`` (a ``model_type`` field; mapped, with what the mapping
    leaves out as a warning), or a sigprop config JSON; ``overrides`` (``key=value``) apply to sigprop configs only.
    ``ValueError`` (one line) otherwise."""
    from pathlib import Path

    from ..core.jsonio import read_config_json
    from ..model.presets import PRESETS, resolve_config

    if model in PRESETS:
        return resolve_config(model, None, overrides)[0], "sigprop", model
    path = Path(model)
    if not path.exists():
        raise ValueError(f"MODEL: {model!r} is neither a preset ({', '.join(PRESETS)}) nor an existing path")
    hf_file = path / "config.json" if path.is_dir() else path
    if path.is_dir() and (path / "run.json").exists():
        from ..model.config import apply_overrides, config_from_dict
        from ..train.run_dir import read_run

        return apply_overrides(config_from_dict(read_run(path)["model_config"]), overrides), "run", path.name
    if hf_file.is_file() and hf_file.suffix == ".json":
        data = read_config_json(hf_file)
        if isinstance(data, dict) and "model_type" in data:
            if overrides:
                raise ValueError("--set applies to sigprop configs; a Hugging Face config is mapped as it is")
            from ..hf.config_map import from_hf

            return from_hf(str(hf_file.parent)), "hf", hf_file.parent.name
        if not path.is_dir():
            return resolve_config(None, path, overrides)[0], "sigprop", path.stem
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


def write_doctor_html(report, path, name: str) -> Path:
    """Write ``report`` (a :class:`~sigprop.analysis.doctor.DoctorReport`) of the model called ``name`` as one HTML
    file at ``path``, atomically."""
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>sigprop doctor: {e(name)}</title>"
             f"<style>{_STYLE}</style></head><body>",
             f"<h1>sigprop doctor: {e(name)}</h1>",
             f'<p class="{"bad" if report.flagged else "ok"}"><b>{e(report.verdict)}</b></p>',
             f"<p>{report.config.total_layers} layers, d = {report.config.d_model}, {e(report.config.norm_position)}"
             f"-LN, init {e(report.config.init)}; {report.seeds} seeds measured "
             f"({'theory only' if report.seeds == 0 else 'theory beside measurement'}).</p>",
             "<h2>Findings</h2>", _findings(report.diagnosis, report.checks)]
    rec = report.recommendation
    if rec is not None:
        parts += ["<h2>Recommendation</h2><ul>", *(f"<li>{e(r)}</li>" for r in rec.reasons), "</ul>",
                  f"<p>Apply it: <code>{e(rec.apply)}</code></p>"]
        if report.fixed_diagnosis is not None:
            still = report.fixed_diagnosis.flagged or any(c.flagged for c in report.fixed_checks)
            verdict = "still flagged" if still else "nothing flagged"
            parts += [f"<p>The fixed model: <b>{verdict}</b>.</p>",
                      _findings(report.fixed_diagnosis, report.fixed_checks)]
    else:
        parts.append("<h2>Recommendation</h2><p>None needed.</p>")
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
