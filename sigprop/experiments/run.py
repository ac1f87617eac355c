"""``run_experiment``: the tuning runs, the best rate per model, the other seeds at it, the summary; resumable at
every point (finished runs are skipped, interrupted ones resumed)."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.jsonio import write_json_atomic
from ..core.outputs import check_output_folder
from .catalog import get_experiment
from .runner import Placement, corpus_mismatch, execute, reference_data
from .schedule import Schedule
from .spec import Experiment, ModelSpec, non_embedding_parameters, plan_runs
from .summary import summarise, write_summary

__all__ = ["ExperimentResult", "run_experiment", "estimate", "cpu_seconds_per_token", "selected_models"]

#: Seconds per token of one single-thread CPU run with another beside it (two cores, two runs): a least-squares fit
#: t = a·(parameters / 10⁶) + b·layers to finished models of ``depth``, ``divergence`` and ``shaped`` at ``--scale
#: cpu``, the rough core-hours of ``--list``. Deep-thin models cost more than their parameters say (per-layer work
#: that does not shrink with the width). The runs it was fitted to and how close it comes to each: the experiments
#: page (docs/results/experiments/README.md, "What `--list`'s costs rest on").
_CPU_S_PER_TOKEN_PER_1M_PARAMETERS = 167e-6
_CPU_S_PER_TOKEN_PER_LAYER = 2.4e-6
#: Tokens per second of one NVIDIA H200 shared by ten runs of ~1.6 M non-embedding parameters (``depth`` and
#: ``divergence`` at ``--scale gpu``; the runs it comes from: the experiments page, the same section): a rough rate
#: for the GPU-minutes of ``--list``.
_H200_TOKENS_PER_S = 1.4e6


@dataclass(frozen=True)
class ExperimentResult:
    """What an invocation leaves: the summary (``rows``), the files written, whether a signal stopped it, and which
    (``stopped_by``: ``signal.SIGINT`` or ``signal.SIGTERM``)."""

    summary: dict
    files: tuple[Path, ...]
    stopped: bool
    runs: tuple = ()
    stopped_by: int | None = None


def _with_overrides(experiment, scale_name: str, overrides, train_overrides):
    """The experiment with ``--set`` applied to every model's config and ``--train-set`` to the shared training
    (each validated by its dataclass). ``ValueError`` for a ``--train-set`` of a field that a model sets for itself
    (a row of `depth-budget`, a ladder rung's batch): the override would silently not reach that model."""
    from ..model.config import apply_overrides, config_from_dict
    from ..train.config import apply_train_overrides, train_config_from_dict

    scale = experiment.scale(scale_name)
    if not overrides and not train_overrides:
        return experiment
    own = {key: m.name for m in scale.models for key in m.train}
    for item in train_overrides or ():
        key = str(item).split("=", 1)[0].strip()
        if key in own:
            raise ValueError(f"--train-set {key}: {experiment.name}'s models set {key} themselves (e.g. "
                             f"{own[key]!r}), so the override would not reach them")
    models = tuple(replace(m, model=apply_overrides(config_from_dict({**scale.base_model, **m.model}),
                                                    list(overrides or ())).to_dict())
                   for m in scale.models)
    train = apply_train_overrides(train_config_from_dict(scale.train), train_overrides).to_dict()
    return replace(experiment, scales={**experiment.scales, scale_name: replace(scale, models=models, train=train)})


def _only(experiment: Experiment, scale_name: str, patterns: Sequence[str]) -> Experiment:
    """The experiment with only the models whose names match one of ``patterns`` (shell-style, ``fnmatch``; none:
    every model). Run ids do not change, so a later run of every model reuses these runs."""
    from fnmatch import fnmatchcase

    if not patterns:
        return experiment
    scale = experiment.scale(scale_name)
    names = [m.name for m in scale.models]
    for pattern in patterns:
        if not any(fnmatchcase(n, pattern) for n in names):
            raise ValueError(f"--model {pattern!r} matches no model of {experiment.name!r} at {scale_name} scale; "
                             f"its models: {', '.join(names)}")
    models = tuple(m for m in scale.models if any(fnmatchcase(m.name, p) for p in patterns))
    return replace(experiment, scales={**experiment.scales, scale_name: replace(scale, models=models)})


def _rung_selection(experiment: Experiment, scale_name: str, rungs: Sequence[int],
                    patterns: Sequence[str]) -> tuple[str, ...]:
    """The names of the models at ``rungs`` of a shape ladder (those matching one of ``patterns`` where given)."""
    from fnmatch import fnmatchcase

    from .ladder import rung_model_names

    if isinstance(rungs, str | int) or not all(isinstance(r, int) and not isinstance(r, bool) for r in rungs):
        raise ValueError(f"--rungs must be widths d such as 64,96,128 (got {rungs!r})")
    names = rung_model_names(experiment.scale(scale_name).models, tuple(rungs))
    if patterns:
        names = tuple(n for n in names if any(fnmatchcase(n, p) for p in patterns))
        if not names:
            raise ValueError(f"--model {', '.join(patterns)} matches no model at rungs {', '.join(map(str, rungs))}")
    return names


def selected_models(experiment: Experiment, scale_name: str, models: Sequence[str] = (),
                    rungs: Sequence[int] = ()) -> Experiment:
    """The experiment at ``scale_name`` with only the models ``--model`` and ``--rungs`` select.

    Args:
        experiment: an experiment of the catalog (:func:`~sigprop.experiments.catalog.get_experiment`).
        scale_name: the scale whose models are selected (``cpu`` or ``gpu``).
        models: shell-style patterns of model names (none: every model).
        rungs: for a shape ladder, the widths d whose models are kept (with ``models``, those of them that match).

    Returns:
        The experiment with that scale's models narrowed; run ids do not change.

    Raises:
        ValueError: a pattern that matches no model, or rungs that are not widths.

    Example:
        >>> from sigprop.experiments.catalog import get_experiment
        >>> ladder = selected_models(get_experiment("shape-ladder"), "cpu", rungs=(64,))
        >>> len(ladder.scale("cpu").models)
        3
    """
    if rungs:
        models = _rung_selection(experiment, scale_name, rungs, models)
    return _only(experiment, scale_name, models)


@contextlib.contextmanager
def _folder_lock(folder: Path):
    """Hold an exclusive lock on ``folder`` (``.lock`` in it) for the duration: two invocations on one folder would
    train the same runs twice. ``ValueError`` if another process holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    with open(folder / ".lock", "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            raise ValueError(f"{folder} is in use by {holder}: wait for it, or stop it (it resumes later)") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"`sigprop experiment` (pid {os.getpid()})")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_experiment(name: str, scale: str = "cpu", seeds: int | None = None, out=None, workers: int | None = None,
                   device: str = "cpu", overrides=(), train_overrides=(), say=print,
                   command: str = "", runs_dir=None, models=(), train: bool = True, rungs=()) -> ExperimentResult:
    """Run experiment ``name`` at ``scale`` into ``out`` (default ``experiments/NAME-SCALE``): the tuning runs
    (the scale's tuning seeds, 0 or 0–1, at every rate; a grid extended past an edge where the best rate sits), then
    the other seeds at each model's best rate, ``workers`` at a time (default: one per
    CPU core, or per GPU with ``device="cuda"``); then ``results.json``, ``table.md`` and ``figure.png``. Runs that
    finished before are skipped and interrupted ones resumed. ``models``: shell-style patterns; only the models
    whose names match one are run, and the table holds every finished run of the experiment in ``out`` (several
    invocations, each of some models, fill one table). ``train=False`` trains nothing: the table, figure and
    evaluation of the runs finished in ``out`` so far (also while another invocation trains there; no lock).
    ``rungs``: for a shape ladder, the widths d whose models run (with ``models``, those of them that match a
    pattern). ``ValueError`` on bad input, before any run.

    An experiment with ``runs_from`` (e.g. ``fp8``) first completes that experiment in ``runs_dir`` (default
    ``experiments/SOURCE-SCALE``: its finished runs are reused), then evaluates its models into ``out``. For an
    experiment that trains, ``runs_dir`` is another experiment's folder, kept records of finished runs
    (``bench/experiment_records.py``), or a list of them: their finished runs of identical spec (a run id ends in a
    digest of both configs; the model's name may differ) are copied into ``out`` instead of trained again
    (``divergence`` and ``depth`` share their Post-LN runs at the deepest shape, ``ablations`` DSLM's). With
    ``device="cuda"`` and more ``workers`` than GPUs, the runs share the GPUs in turn (small models leave a GPU
    mostly idle between kernel launches)."""
    experiment = get_experiment(name)
    folders = [] if runs_dir is None else [runs_dir] if isinstance(runs_dir, str | Path) else list(runs_dir)
    if experiment.runs_from is not None:
        if len(folders) > 1:
            raise ValueError(f"--runs-dir: {name!r} evaluates one folder of {experiment.runs_from!r}'s runs "
                             f"(got {len(folders)})")
        runs_dir = folders[0] if folders else None
        if models:
            raise ValueError(f"--model selects models of an experiment that trains; {name!r} evaluates "
                             f"{experiment.runs_from!r}'s")
        return _run_evaluation(experiment, scale, seeds, out, workers, device, overrides, train_overrides, say,
                               command, runs_dir, train)
    if scale == "paper":
        raise ValueError("--scale paper is the paper's configuration, documented in `sigprop experiment --list` and "
                         "table.md: it is not run here (use cpu or gpu)")
    whole = _with_overrides(experiment, scale, overrides, train_overrides)
    experiment = selected_models(whole, scale, models, rungs)
    spec = experiment.scale(scale)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu or cuda (got {device!r})")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda: CUDA is not available on this machine")
        available = torch.cuda.device_count()
    else:
        available = os.cpu_count() or 1
    workers = available if workers is None else workers
    # a run needs a CPU core to feed it: on GPUs, as many runs as cores (small models share a GPU well)
    most = max(available, 1) * 4 if device == "cpu" else max(available, os.cpu_count() or 1)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= most:
        raise ValueError(f"--workers must be an integer in [1, {most}] (got {workers!r})")
    out = check_output_folder(Path(out) if out is not None else Path("experiments") / f"{name}-{scale}", "--out")
    folders = [Path(f) for f in folders]
    for folder in folders:
        if not folder.is_dir():
            raise ValueError(f"--runs-dir {folder}: no such folder")
        if folder.resolve() == out.resolve():
            raise ValueError("--runs-dir must differ from --out: it is another experiment's folder to reuse runs from")
    tuning = plan_runs(experiment, scale, seeds)  # validates seeds and every config before any run
    gpus = available if device == "cuda" else 1
    if not train:
        if not out.is_dir():
            raise ValueError(f"--table-only: {out} holds no runs of {name!r} (no such folder)")
        return _train(experiment, whole, name, scale, spec, seeds, out, workers, device, say, command, tuning,
                      Placement(gpus=gpus, reuse=folders), train=False)
    with _folder_lock(out):
        return _train(experiment, whole, name, scale, spec, seeds, out, workers, device, say, command, tuning,
                      Placement(gpus=gpus, reuse=folders))


def _finished_runs(experiment, scale: str, seeds, out: Path, corpus=None, refused=None) -> list:
    """Every run of ``experiment`` (all its models) that finished in ``out``, whichever invocation ran it (one with
    ``--model``, an earlier grid extension, a copy from ``--runs-dir``): a fate file whose run id is the id this
    experiment gives that model, rate and seed (a run of other configs, e.g. under ``--set``, is left out).
    ``corpus``: model name → (its data's fingerprint, whether one is required); a run whose record says it trained
    on other data is left out too, and why is appended to ``refused``."""
    from .runner import FATE_FILE, RunResult, _fate_of

    names = {m.name for m in experiment.scale(scale).models}
    fates = []
    for fate_file in sorted(out.glob(f"*/{FATE_FILE}")):
        fate = _fate_of(fate_file.parent)  # None for a crash an older version recorded as a fate: not a result
        # a run's own folder only: not an interrupted copy (".RUN_ID.copying") nor a run set aside
        if fate is not None and fate.get("model_name") in names and fate.get("run_id") == fate_file.parent.name:
            fates.append(fate)
    tuned: dict = {}
    for fate in fates:
        if fate["tuning"]:
            tuned.setdefault(fate["model_name"], set()).add(fate["lr"])
    expected = {r.run_id for r in plan_runs(experiment, scale, seeds, extra_lrs=tuned)}
    for lr in {fate["lr"] for fate in fates if not fate["tuning"]}:
        best = {fate["model_name"]: lr for fate in fates if not fate["tuning"] and fate["lr"] == lr}
        expected |= {r.run_id for r in plan_runs(experiment, scale, seeds, best_lr=best)}
    pooled = []
    for fate in fates:
        if fate["run_id"] not in expected:
            continue
        why = corpus_mismatch(out / fate["run_id"], *corpus[fate["model_name"]]) if corpus else None
        if why is not None:
            if refused is not None:
                refused.append(why)
            continue
        pooled.append(RunResult.from_record(fate))
    return pooled


def _train(experiment, whole, name, scale, spec, seeds, out, workers, device, say, command, tuning,
           placement: Placement, train: bool = True) -> ExperimentResult:
    """Train ``experiment``'s runs (perhaps some models of ``whole``, by ``--model``; none if not ``train``), then
    tabulate every finished run of ``whole`` in ``out``: a folder filled by several invocations gets one table of all
    it holds."""
    every = whole.scale(scale)
    params = {m.name: non_embedding_parameters(_config(every, m)) for m in every.models}
    tokens = {}
    planned = plan_runs(whole, scale, seeds)
    for run in planned:
        tokens.setdefault(run.model_name, run.train_config["steps"] * run.train_config["batch_size"]
                          * run.model_config["seq_len"] * (2 if run.model_config["arch"] == "encoder_decoder" else 1))
    if train:
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "experiment.json", {"experiment": name, "scale": scale, "command": command,
                                                    "runs_planned": len(tuning), "seeds": seeds or spec.seeds})
        tuners = min(spec.tuning_seeds, seeds or spec.seeds)
        say(f"{name} at {scale} scale: {len(spec.models)} models, {len(tuning)} tuning runs "
            f"({'seed 0' if tuners == 1 else f'seeds 0–{tuners - 1}'} at each rate of a model's grid), then "
            f"{(seeds or spec.seeds) - tuners} more seed(s) at each best rate; {workers} run(s) at a time; into {out}")
    else:
        say(f"{name}: the table of the runs finished in {out} (training nothing)")
        with contextlib.suppress(OSError, ValueError, KeyError):  # the table names the command that trained
            command = json.loads((out / "experiment.json").read_text(encoding="utf-8"))["command"] or command
    from ..data.pinned import is_pinned

    unigram, corpus = {}, {}
    cache: dict = {}
    for run in planned:
        key = (run.model_config["vocab_size"], run.train_config["data"], run.train_config["val_fraction"],
               run.model_config["input"])
        if key not in cache:
            cache[key] = reference_data(run.model_config, run.train_config)
        unigram[run.model_name] = cache[key][0]
        corpus[run.model_name] = (cache[key][1], is_pinned(run.train_config["data"]))
    placement = replace(placement, corpus=corpus)
    margin = experiment.stall_margin
    stopped, stopped_by = True, None  # a table without training counts as stopped: nothing more runs
    if train:  # each model tuned, extended and given its other seeds as soon as its own runs allow
        _, stopped_by = execute(Schedule(experiment, scale, seeds, say), out, workers, device, unigram, margin, say,
                                placement=placement)
        stopped = stopped_by is not None
    refused: list[str] = []
    results = _finished_runs(whole, scale, seeds, out, corpus, refused)
    for why in refused:
        say(f"not pooled: {why}")
    summary = summarise(whole, scale, every, results, unigram, params, tokens, command, seeds or spec.seeds)
    if refused:
        summary["not_pooled"] = refused
    files = write_summary(summary, out, results)
    if experiment.evaluation is not None:  # also of a stopped experiment: its finished runs, its table so far
        from .evaluations import EVALUATIONS

        evaluate, write = EVALUATIONS[experiment.evaluation]
        table = evaluate(summary, results, out, out, say)
        files += write(table, out, f"{name} ({scale} scale)", f"{experiment.question}\n\nReproduces: "
                       f"{experiment.reference}.\n\nCommand: `{command}`")
    return ExperimentResult(summary, files, stopped and train, results, stopped_by)


def _run_evaluation(experiment, scale, seeds, out, workers, device, overrides, train_overrides, say, command,
                    runs_dir, train: bool = True) -> ExperimentResult:
    from .evaluations import EVALUATIONS

    source = experiment.runs_from
    experiment.scale(scale)
    out = check_output_folder(Path(out) if out is not None else Path("experiments") / f"{experiment.name}-{scale}",
                              "--out")
    runs_dir = check_output_folder(Path(runs_dir) if runs_dir is not None else Path("experiments") /
                                   f"{source}-{scale}", "--runs-dir")
    if out.resolve() == runs_dir.resolve():
        raise ValueError(f"--out and --runs-dir must differ: {experiment.name} writes its own table beside "
                         f"{source}'s runs, not over {source}'s table")
    evaluate, write = EVALUATIONS[experiment.evaluation]
    header = [f"{experiment.name}: the trained models of `{source}` in {runs_dir} (its missing runs are trained "
              "first)"]

    def said(line: str) -> None:  # the header with the source's first line: not before its input is checked
        if header:
            say(header.pop())
        say(line)

    parts = ["sigprop", "experiment", source, "--scale", scale, "--out", str(runs_dir)]
    parts += ["--seeds", str(seeds)] if seeds is not None else []
    trained = run_experiment(source, scale, seeds, runs_dir, workers, device, overrides, train_overrides, said,
                             " ".join(parts), train=train)
    if trained.stopped:
        return ExperimentResult(trained.summary, trained.files, True, stopped_by=trained.stopped_by)
    with _folder_lock(out):
        table = evaluate(trained.summary, trained.runs, runs_dir, out, say)
        table.update(question=experiment.question, reference=experiment.reference, command=command,
                     source=str(runs_dir))
        files = write(table, out, f"{experiment.name} ({scale} scale)",
                      f"{experiment.question}\n\nReproduces: {experiment.reference}. Models: the `{source}` "
                      f"experiment's runs in `{runs_dir}`, each at its best learning rate, every seed.\n\n"
                      f"Command: `{command}`")
    return ExperimentResult(table, files, False)


def _config(scale, model: ModelSpec):
    from ..model.config import config_from_dict

    return config_from_dict({**scale.base_model, **model.model})


def _fixed_tokens(scale, model: ModelSpec, config) -> float:
    from ..train.config import train_config_from_dict

    train = train_config_from_dict({**scale.train, **model.train})
    return float(train.steps * train.batch_size * config.seq_len * (2 if config.arch == "encoder_decoder" else 1))


def cpu_seconds_per_token(config) -> float:
    """The rough wall time per training token of one single-thread CPU run of a model of ``config`` with another run
    beside it: a·(parameters / 10⁶) + b·layers (:data:`_CPU_S_PER_TOKEN_PER_1M_PARAMETERS`, a fit to measured runs)."""
    from ..model.size import parameter_count

    layers = config.n_layers + ((config.n_decoder_layers or config.n_layers) if config.arch == "encoder_decoder" else 0)
    return _CPU_S_PER_TOKEN_PER_1M_PARAMETERS * parameter_count(config) / 1e6 + _CPU_S_PER_TOKEN_PER_LAYER * layers


def estimate(name: str, scale: str) -> dict:
    """The size of experiment ``name`` at ``scale``: models, runs (tuning + other seeds), tokens, and on a CPU a
    rough single-thread wall time (:data:`_CPU_S_PER_TOKEN_PER_1M_PARAMETERS`) and the minutes of one H200 running
    several runs at once (:data:`_H200_TOKENS_PER_S`), for ``--list``."""

    experiment = get_experiment(name)
    spec = experiment.scale(scale)
    if experiment.runs_from is not None:
        return {"models": len(spec.models), "runs": 0, "tokens": 0.0, "cpu_core_hours": 0.0,
                "evaluates": experiment.runs_from}
    runs = plan_runs(experiment, scale)
    n_runs = len(runs) + len(spec.models) * (spec.seeds - spec.tuning_seeds)
    total_tokens, cpu_seconds = 0.0, 0.0
    for m in spec.models:
        config = _config(spec, m)
        per_parameter = m.tokens_per_parameter_at(spec)
        per_run = (per_parameter * non_embedding_parameters(config) if per_parameter is not None
                   else _fixed_tokens(spec, m, config))
        count = len(m.lrs) * spec.tuning_seeds + spec.seeds - spec.tuning_seeds
        total_tokens += per_run * count
        cpu_seconds += per_run * count * cpu_seconds_per_token(config)
    return {"models": len(spec.models), "runs": n_runs, "tokens": total_tokens,
            "cpu_core_hours": cpu_seconds / 3600 if math.isfinite(cpu_seconds) else None,
            "h200_minutes": total_tokens / _H200_TOKENS_PER_S / 60}
