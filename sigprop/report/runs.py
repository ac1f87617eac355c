"""What ``sigprop predict``, ``measure``, ``compare`` and ``inits`` do, as library functions: a :class:`Request`
(every option, validated in one place before any work starts), one run function per command, and a result that the
command line prints. Each run resolves the configuration (a preset, a JSON file, ``--set`` overrides), checks that
the work fits in memory, builds the batch, runs, diagnoses, and writes the requested JSON and figure (atomically,
to paths checked up front).

Defaults written once: seeds and batch size are the preset's (:mod:`sigprop.model.presets`), else 4 seeds and 8
sequences; ``predict`` takes the same batch size as ``measure`` and ``compare`` of the same preset, so "the same
statistics" are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.comparison import Comparison, read_measured
from ..analysis.diagnosis import Diagnosis, record_diagnosis
from ..analysis.experiment import GRAD_BOUNDARIES, batch_prediction, compare_config, config_batch, stored_setup
from ..components.draws import DEFAULT_HEADS
from ..core.devices import parse_devices
from ..core.outputs import check_output_path
from ..core.profile import Profile
from ..core.progress import Progress, tasks
from ..core.validate import integer_value
from ..measurement.merge import merge_measurements
from ..measurement.seeds import measure_seeds
from ..model.config import TransformerConfig
from ..model.presets import Preset, resolve_config
from ..model.size import check_fits, measure_bytes, theory_bytes
from ..theory.spread import check_spread

__all__ = ["Request", "PredictRun", "MeasureRun", "CompareRun", "InitsRun", "run_predict", "run_measure",
           "run_compare", "run_inits", "batch_source", "DEFAULT_SEEDS", "DEFAULT_BATCH_SIZE"]

#: Seeds and batch size where neither the options nor a preset say.
DEFAULT_SEEDS, DEFAULT_BATCH_SIZE = 4, 8


def _path(value, what: str, file: bool = True) -> Path | None:
    """An input path that must exist (a file, or with ``file=False`` a file or folder)."""
    if value is None:
        return None
    if not str(value).strip():
        raise ValueError(f"{what} needs a path (got {str(value)!r})")
    path = Path(value)
    if not path.exists():
        raise ValueError(f"{what}: {'file' if file else 'file or folder'} not found: {path}")
    if file and path.is_dir():
        raise ValueError(f"{what}: {path} is a folder, not a file")
    return path


def _data(value) -> Path | str | None:
    """``--data``: the word ``python`` is the larger built-in corpus (:data:`~sigprop.data.corpus.PYTHON_CORPUS`,
    as in ``sigprop train``; a folder of that name is ``./python``), anything else a file or folder that must
    exist."""
    from ..data.corpus import PYTHON_CORPUS

    if isinstance(value, str) and value == PYTHON_CORPUS:
        return PYTHON_CORPUS
    return _path(value, "--data", file=False)


def _once(source, request: Request) -> None:
    """``ValueError`` where seeds are asked of a Hugging Face folder's saved weights, which are measured once."""
    if source.weights is not None and not request.fresh:
        _refuse(f"--hf {request.hf}: its saved weights are one model, measured once (--fresh measures fresh draws of "
                "its config)", seeds=None if request.seeds == 1 else request.seeds, first_seed=request.first_seed)


def _refuse(why: str, **options) -> None:
    """``ValueError`` naming the command-line flags among ``options`` (keyword = flag without its dashes) that
    were given, if any: ``why`` they do not apply."""
    given = ["--" + name.replace("_", "-") for name, value in options.items() if value not in (None, False, (), 0)]
    if given:
        raise ValueError(f"{why}: leave out {', '.join(given)}")


@dataclass(frozen=True)
class Request:
    """Everything a predict / measure / compare run is asked, checked on construction (``ValueError`` naming the
    option): which model (``preset``, ``config_file``, ``overrides``), its batch (``batch_size``, ``data`` or
    ``synthetic``; ``real``: predict on a batch of the default corpus), how many ``seeds`` from ``first_seed`` on
    which ``device`` (a list measures on several at once), the theory's options (``attention_heads``,
    ``token_resolved``, ``grad_boundary``; ``spread``: predict's seed-to-seed spread), a stored measurement to
    compare against (``measured``) or measurements to merge (``merge``), and the outputs (``json``; ``csv``: a row
    per site, a column per statistic; ``plot``: a PNG)."""

    preset: str | None = None
    config_file: Path | None = None
    overrides: tuple[str, ...] = ()
    seeds: int | None = None
    batch_size: int | None = None
    data: Path | str | None = None
    synthetic: bool = False
    real: bool = False
    device: str | None = None
    first_seed: int = 0
    attention_heads: int = DEFAULT_HEADS
    token_resolved: bool | None = None
    spread: bool = False
    grad_boundary: str = "measured"
    measured: Path | None = None
    merge: tuple[Path, ...] = ()
    hf: Path | None = None
    run: Path | None = None
    fresh: bool = False
    json: Path | None = None
    csv: Path | None = None
    plot: Path | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "overrides", tuple(self.overrides or ()))
        set_(self, "merge", tuple(self.merge or ()))
        if self.seeds is not None:
            integer_value(self.seeds, "--seeds", 1)
        if self.batch_size is not None:
            integer_value(self.batch_size, "--batch-size", 1)
        integer_value(self.first_seed, "--first-seed", 0)
        integer_value(self.attention_heads, "--attention-heads", 2)
        if self.grad_boundary not in GRAD_BOUNDARIES:
            raise ValueError(f"--grad-boundary must be one of {', '.join(GRAD_BOUNDARIES)} "
                             f"(got {self.grad_boundary!r})")
        if self.synthetic and self.data is not None:
            raise ValueError("--data and --synthetic exclude each other: --synthetic draws its own inputs")
        if self.real and (self.data is not None or self.synthetic):
            raise ValueError("--real reads the default corpus: leave out --data and --synthetic")
        set_(self, "config_file", _path(self.config_file, "--config"))
        set_(self, "data", _data(self.data))
        set_(self, "measured", _path(self.measured, "--measured"))
        set_(self, "merge", tuple(_path(p, "--merge") for p in self.merge))
        if self.hf is not None:
            from ..hf.measure import resolve_hf_location

            set_(self, "hf", resolve_hf_location(self.hf))
        if self.run is not None:
            set_(self, "run", _path(self.run, "--run", file=False))
            if not (self.run / "run.json").is_file():
                raise ValueError(f"--run: {self.run} is no run directory (no run.json): give a `sigprop train --out` "
                                 "folder")
            _refuse("--run measures the trained model as it is configured, on the CPU", preset=self.preset,
                    config=self.config_file, set=self.overrides, merge=self.merge, hf=self.hf,
                    device=None if self.fresh else self.device)
            if not self.fresh:
                from ..train.checkpoint import latest_checkpoint

                _refuse("--run's trained weights are one model, measured once (--fresh measures fresh draws of its "
                        "config)", seeds=None if self.seeds == 1 else self.seeds, first_seed=self.first_seed)
                if latest_checkpoint(self.run) is None:  # else fresh seeds, measured as if it were trained
                    raise ValueError(f"--run: {self.run} holds no checkpoint yet (its first comes after "
                                     "checkpoint_every steps): add --fresh for fresh draws of its config")
        if self.fresh and self.hf is None and self.run is None:
            raise ValueError("--fresh applies to --hf or --run (a model's saved weights)")
        if self.hf is not None:
            _refuse("--hf measures the Hugging Face model as it is configured", preset=self.preset,
                    config=self.config_file, set=self.overrides, merge=self.merge, device=self.device)
        if self.measured is not None:
            _refuse("--measured takes the model and its seeds from the file", preset=self.preset,
                    config=self.config_file, set=self.overrides, seeds=self.seeds, device=self.device,
                    merge=self.merge, hf=self.hf, run=self.run, fresh=self.fresh)
        if self.merge:
            _refuse("--merge measures nothing", preset=self.preset, config=self.config_file, set=self.overrides,
                    seeds=self.seeds, batch_size=self.batch_size, data=self.data, synthetic=self.synthetic,
                    device=self.device, first_seed=self.first_seed)
        if self.device is not None:
            parse_devices(self.device)  # an unavailable device stops the run before anything is built
        if self.json is not None:
            set_(self, "json", check_output_path(self.json, "--json"))
        if self.csv is not None:
            set_(self, "csv", check_output_path(self.csv, "--csv", ".csv"))
        if self.plot is not None:
            set_(self, "plot", check_output_path(self.plot, "--plot", ".png"))

    def model(self) -> tuple[TransformerConfig, Preset | None]:
        """The configuration asked for and its preset (or None): :func:`~sigprop.model.presets.resolve_config`, or
        for ``--hf`` the mapping of the Hugging Face model's configuration (:func:`sigprop.hf.config_map.from_hf`)."""
        if self.hf is not None:  # from_hf warns with what the mapping leaves out (a sliding window, biases, ...)
            from ..hf.config_map import from_hf
            from ..hf.measure import read_hf_source

            return from_hf(read_hf_source(self.hf).config), None
        if self.run is not None:
            from ..model.config import config_from_dict
            from ..train.run_dir import read_run

            return config_from_dict(read_run(self.run)["model_config"]), None
        return resolve_config(self.preset, self.config_file, self.overrides)

    def saved(self, config: TransformerConfig):
        """The model with weights of its own that ``--hf`` (a folder's safetensors) or ``--run`` (its newest
        checkpoint) names, as a :class:`~sigprop.analysis.doctor.SavedModel`; None for a configuration, a folder
        without weights, a run without a checkpoint, or with ``--fresh``."""
        if self.fresh:
            return None
        from .doctor import saved_hf_model, saved_run_model

        if self.hf is not None:
            from ..hf.measure import read_hf_source

            source = read_hf_source(self.hf)
            return None if source.weights is None else saved_hf_model(source.path)
        if self.run is not None:
            from ..train.checkpoint import latest_checkpoint

            return None if latest_checkpoint(self.run) is None else saved_run_model(self.run)
        return None

    def seeds_for(self, preset: Preset | None) -> int:
        return self.seeds if self.seeds is not None else (preset.seeds if preset else DEFAULT_SEEDS)

    def batch_size_for(self, preset: Preset | None) -> int:
        return self.batch_size if self.batch_size is not None else (preset.batch_size if preset else
                                                                    DEFAULT_BATCH_SIZE)

    def title(self, fallback: str) -> str:
        """A figure's title: the preset (or ``fallback``) and the overrides."""
        return (self.preset or fallback) + (f" ({', '.join(self.overrides)})" if self.overrides else "")


def batch_source(request: Request) -> str:
    """What a measurement's batch was read from, as its meta records it and ``compare --measured`` reads it back:
    "default" (the standard library's source, or the digits for a patch model), "synthetic", or the ``--data``
    path."""
    return "synthetic" if request.synthetic else (str(request.data) if request.data is not None else "default")


def _batch(config: TransformerConfig, request: Request, batch_size: int, progress: Progress, notes: list[str]):
    tasks(progress).task("building the batch (a corpus is tokenised once, then cached)", None)
    filled, batch = config_batch(config, batch_size, request.data, 0, request.synthetic)
    if filled.input_corr != config.input_corr:
        notes.append(f"input_corr = {filled.input_corr:.4f}: the token correlation of this batch's images after the "
                     "patch embedding (DSLM's schedule starts from it, App. H)")
    return filled, batch


def _write(profile_or_comparison, request: Request, plot, written: list) -> None:
    if request.json is not None:
        profile_or_comparison.write_json(request.json)
        written.append(("JSON", request.json))
    if request.csv is not None:
        profile_or_comparison.write_csv(request.csv)
        written.append(("CSV", request.csv))
    if request.plot is not None:
        written.append(("figure", plot(request.plot)))


@dataclass
class PredictRun:
    """A prediction: the config, its profile and diagnosis, notes to print, and the files written."""

    config: TransformerConfig
    profile: Profile
    diagnosis: Diagnosis
    notes: list = field(default_factory=list)
    written: list = field(default_factory=list)


def _hf_batch(source, config: TransformerConfig | None, request: Request, batch_size: int, progress):
    """(config, batch, what tokenised it) for a Hugging Face model: text encoded by its folder's tokenizer where it
    holds one (:func:`~sigprop.hf.measure.hf_batch`), else sigprop's batch of its mapped config, or for an unmapped
    family a batch of its head's objective (:func:`~sigprop.hf.measure.hf_token_batch`)."""
    from ..hf.measure import hf_batch, hf_token_batch

    tasks(progress).task("building the batch (a corpus is tokenised once, then cached)", None)
    batch, tokenised = (None, "i.i.d. Zipf(1) tokens") if request.synthetic else hf_batch(
        source, config, batch_size, request.data)
    if batch is None and config is not None:
        config, batch = _batch(config, request, batch_size, progress, [])
    elif batch is None:
        batch = hf_token_batch(source, batch_size, request.data, request.synthetic)
    return config, batch, tokenised


def _saved_plan(saved, model, config: TransformerConfig, notes: list[str]):
    """:func:`~sigprop.analysis.doctor.saved_plan`, saying first what the theory reads."""
    from ..analysis.doctor import saved_plan

    notes.append(f"the theory reads the standard deviations of {saved.describe} (--fresh: a freshly initialised "
                 "model of its configuration)")
    return saved_plan(saved, model, config, notes)


def _stored_plan(path: Path, stored: Profile, config: TransformerConfig, notes: list[str]):
    """The plan of the saved weights a stored measurement was made of (a run's checkpoint, a Hugging Face folder:
    ``meta["saved"]``, or ``hf_source`` in files written before it), so that the theory describes the same model;
    None for a measurement of fresh seeds. ``ValueError`` where the weights are no longer where the file says, or
    the run has a newer checkpoint: a fresh model's theory would be compared with them without a word."""
    from ..train.checkpoint import latest_checkpoint
    from .doctor import saved_hf_model, saved_run_model

    where = stored.meta.get("saved")
    if where is None and stored.meta.get("hf_weights") == "saved":
        where = {"kind": "hf", "path": stored.meta.get("hf_source", "")}
    if where is None:
        if "weights" in stored.meta:
            raise ValueError(f"{path}: a measurement of {stored.meta['weights']} that does not say where they are: "
                             "compare --run / --hf measures and predicts them together")
        return None
    folder = Path(str(where.get("path", "")))
    again = f"compare --{'run' if where.get('kind') == 'run' else 'hf'} {folder} measures and predicts them again"
    if not str(where.get("path", "")) or not folder.exists():
        raise ValueError(f"{path}: measured on the saved weights in {folder}, not found from here (the theory reads "
                         f"them): {again}")
    if where.get("kind") == "run":
        newest = latest_checkpoint(folder)
        if newest is None or newest.name != where.get("checkpoint"):
            raise ValueError(f"{path}: measured on {where.get('checkpoint')} of {folder}, whose newest checkpoint is "
                             f"now {None if newest is None else newest.name}: {again}")
        saved = saved_run_model(folder)
    else:
        saved = saved_hf_model(folder)
    return _saved_plan(saved, saved.load(), config, notes)


def _measure_saved(saved, model, config: TransformerConfig, batch: dict, progress) -> Profile:
    """:func:`~sigprop.analysis.doctor.measure_saved`, with its progress."""
    from ..analysis.doctor import measure_saved

    tick = tasks(progress).task(f"measure {saved.describe}", 1)
    profile = measure_saved(saved, model, config, batch)
    tick(1)
    return profile


def run_predict(request: Request, progress: Progress | None = None) -> PredictRun:
    """``sigprop predict``: the theory of the model asked for, on a batch when ``data`` / ``real`` are given (and
    always for a patch model, whose input moments come from images), else from theory (Zipf tokens)."""
    from .profiles import plot_profiles

    config, preset = request.model()
    if request.spread:
        check_spread(config)
    batch_size, notes = request.batch_size_for(preset), []
    use_batch = request.data is not None or request.real or request.synthetic or config.input == "patches"
    check_fits(theory_bytes(config, batch_size if use_batch else 0, request.attention_heads, request.token_resolved),
               f"predicting {config.total_layers} layers")
    batch = None
    if use_batch and request.hf is not None:  # the batch measure and compare --hf take: the folder's tokenizer
        from ..hf.measure import read_hf_source

        config, batch, tokenised = _hf_batch(read_hf_source(request.hf), config, request, batch_size, progress)
        notes.append(f"tokenised by {tokenised}")
    elif use_batch:
        config, batch = _batch(config, request, batch_size, progress, notes)
    saved, plan = request.saved(config), None
    if saved is not None:
        plan = _saved_plan(saved, saved.load(), config, notes)
    tasks(progress).task(f"build the theory's model of {config.total_layers} layers (no weights drawn)", None)
    prediction = batch_prediction(config, batch, batch_size, request.attention_heads, request.token_resolved,
                                  plan=plan)
    tick = tasks(progress).task(f"predict {config.total_layers} layers (forward, backward"
                                f"{', spread' if request.spread else ''})", prediction.steps(spread=request.spread))
    profile = prediction.profile(progress=tick, spread=request.spread)
    diagnosis = record_diagnosis(profile)
    run = PredictRun(config, profile, diagnosis, notes)
    _write(profile, request, lambda path: plot_profiles(path, predicted=profile, title=request.title("prediction")),
           run.written)
    return run


@dataclass
class MeasureRun:
    """A measurement (or a merge of measurements): the config, the seed-averaged profile and its diagnosis, the
    number of seeds, and the files written."""

    config: TransformerConfig | None
    profile: Profile
    diagnosis: Diagnosis
    seeds: int
    written: list = field(default_factory=list)


def _measure_hf(request: Request, progress: Progress | None) -> tuple[TransformerConfig | None, Profile]:
    """``sigprop measure --hf``: the Hugging Face model of any family, on the batch of its mapped configuration, or
    for an unmapped family on a batch built from its own configuration, its profile saying why the theory is not
    available (:mod:`sigprop.hf.measure`). Returns (the mapped config or None, the profile)."""
    from ..hf.config_map import map_hf_config
    from ..hf.measure import measure_hf, read_hf_source

    source = read_hf_source(request.hf)
    _once(source, request)
    seeds = 1 if source.weights is not None and not request.fresh else request.seeds_for(None)
    batch_size = request.batch_size_for(None)
    try:
        config, theory = map_hf_config(source.config).config, None
    except ValueError as err:
        config, theory = None, str(err)
    if config is not None:
        check_fits(measure_bytes(config, batch_size), f"measuring a model of {config.total_layers} layers")
    config, batch, tokenised = _hf_batch(source, config, request, batch_size, progress)
    what = f"{config.total_layers} layers" if config is not None else source.config.model_type
    tick = tasks(progress).task(f"measure the Hugging Face model ({what}) × {seeds}", seeds)
    profile = measure_hf(source, batch, seeds, request.first_seed, progress=tick, config=config, theory=theory,
                         fresh=request.fresh)
    profile.meta["tokenizer"] = tokenised
    return config, profile


def run_measure(request: Request, progress: Progress | None = None) -> MeasureRun:
    """``sigprop measure``: ``seeds`` models of the config measured with hooks on its batch (every seed's rows kept,
    so slices measured apart merge exactly), or with ``merge`` the merge of measurements made before."""
    from .profiles import plot_profiles

    if request.merge:
        profile = merge_measurements([read_measured(path) for path in request.merge])
        config = None
    else:
        if request.hf is not None:
            config, profile = _measure_hf(request, progress)
        else:
            config, preset = request.model()
            seeds, batch_size = request.seeds_for(preset), request.batch_size_for(preset)
            check_fits(measure_bytes(config, batch_size), f"measuring a model of {config.total_layers} layers")
            config, batch = _batch(config, request, batch_size, progress, [])
            saved = request.saved(config)
            if saved is not None:  # a run's trained weights, measured once
                profile = _measure_saved(saved, saved.load(), config, batch, progress)
            else:
                tick = tasks(progress).task(f"measure {config.total_layers} layers × {seeds} seeds", seeds)
                profile = measure_seeds(config, batch, seeds, request.first_seed, progress=tick,
                                        device=request.device, per_seed=True)
        profile.meta["batch_source"] = batch_source(request)
    diagnosis = record_diagnosis(profile)
    run = MeasureRun(config, profile, diagnosis, len(profile.meta.get("seeds", [])))
    _write(profile, request, lambda path: plot_profiles(path, measured=profile, title=request.title("measurement")),
           run.written)
    return run


@dataclass
class CompareRun:
    """A comparison: the config, both profiles, their :class:`~sigprop.analysis.comparison.Comparison`, the number
    of seeds measured, notes to print, and the files written."""

    config: TransformerConfig
    predicted: Profile
    measured: Profile
    comparison: Comparison
    seeds: int
    notes: list = field(default_factory=list)
    written: list = field(default_factory=list)


def run_compare(request: Request, progress: Progress | None = None) -> CompareRun:
    """``sigprop compare``: measure and predict the same model on the same batch and compare them per layer, or with
    ``measured`` predict against a stored measurement (its model and batch rebuilt from the file)."""
    from .profiles import plot_profiles

    notes: list[str] = []
    progress = tasks(progress)
    plan = None
    if request.measured is not None:
        config, stored, batch = stored_setup(request.measured, request.batch_size, request.data, request.synthetic)
        if request.spread:
            check_spread(config)
        seeds, measure_tick = len(stored.meta.get("seeds", [])), None
        plan = _stored_plan(request.measured, stored, config, notes)
    else:
        config, preset = request.model()
        seeds, batch_size = request.seeds_for(preset), request.batch_size_for(preset)
        if request.spread:
            check_spread(config)
        check_fits(max(measure_bytes(config, batch_size),
                       theory_bytes(config, batch_size, request.attention_heads, request.token_resolved)),
                   f"comparing a model of {config.total_layers} layers")
        stored, saved = None, request.saved(config)
        if request.hf is None:
            config, batch = _batch(config, request, batch_size, progress, notes)
            if saved is not None:  # a run's trained weights, measured once
                model = saved.load()
                plan = _saved_plan(saved, model, config, notes)
                stored, seeds = _measure_saved(saved, model, config, batch, progress), 1
        else:  # the Hugging Face model itself: its saved weights once, or fresh seeds
            from ..hf.measure import measure_hf, read_hf_source

            source = read_hf_source(request.hf)
            _once(source, request)
            config, batch, tokenised = _hf_batch(source, config, request, batch_size, progress)
            notes.append(f"tokenised by {tokenised}")
            plan = None if saved is None else _saved_plan(saved, saved.load(), config, notes)
            seeds = 1 if saved is not None else seeds
            tick = progress.task(f"measure the Hugging Face model ({config.total_layers} layers) × {seeds}", seeds)
            stored = measure_hf(source, batch, seeds, request.first_seed, progress=tick, config=config,
                                fresh=request.fresh)
    prediction = batch_prediction(config, batch, attention_heads=request.attention_heads,
                                  token_resolved=request.token_resolved, plan=plan)
    predict_tick = progress.task(f"predict {config.total_layers} layers (forward, backward"
                                 f"{', spread' if request.spread else ''})", prediction.steps(spread=request.spread))
    measure_tick = None if stored is not None else progress.task(
        f"measure {config.total_layers} layers × {seeds} seeds", seeds)
    predicted, measured, comparison = compare_config(
        config, batch, seeds, request.grad_boundary, progress=measure_tick, device=request.device,
        predict_progress=predict_tick, measured=stored, prediction=prediction, spread=request.spread)
    if request.measured is None:
        measured.meta["batch_source"] = batch_source(request)
    if notes:  # what the theory reads and where it is approximate: in the JSON too, not only on the terminal
        predicted.meta["notes"] = list(notes)
    run = CompareRun(config, predicted, measured, comparison, seeds, notes)
    name = request.title(request.measured.stem if request.measured else "model")
    _write(comparison, request, lambda path: plot_profiles(
        path, predicted, measured, title=f"{name}: theory vs measurement",
        summary={q: s.to_dict() for q, s in comparison.summaries.items()}), run.written)
    return run


@dataclass
class InitsRun:
    """An init sweep: the config, one row per scheme and depth, the orders of growth in N, the files written."""

    config: TransformerConfig
    rows: list
    orders: list
    depths: list
    written: list = field(default_factory=list)


def run_inits(request: Request, inits: list[str] | None = None, depths: list[int] | None = None,
              progress: Progress | None = None) -> InitsRun:
    """``sigprop inits``: the theory of the config under every scheme of ``inits`` (default:
    :data:`~sigprop.analysis.init_sweep.DEFAULT_INITS`) at every depth of ``depths`` (default: its n_layers), each
    diagnosed, with the orders of growth in N over three or more depths. Schemes, depths and the figure's need of
    two depths are checked before anything is predicted."""
    from ..analysis.init_sweep import DEFAULT_INITS, depth_orders, sweep_inits, sweep_json, sweep_steps
    from ..core.jsonio import write_json_atomic
    from ..model.init_schemes import SCHEME_NAMES
    from .inits import plot_init_sweep

    names = list(inits) if inits else list(DEFAULT_INITS)
    unknown = [n for n in names if n not in SCHEME_NAMES]
    if unknown:
        raise ValueError(f"--inits: unknown scheme(s) {', '.join(unknown)}; schemes: {', '.join(SCHEME_NAMES)}")
    config, preset = request.model()
    layer_counts = [integer_value(n, "--depths (layer counts)", 1) for n in (depths or [config.n_layers])]
    if request.plot is not None and len(set(layer_counts)) < 2:
        raise ValueError("--plot draws each scheme's change with depth: give --depths two or more depths, e.g. "
                         "12,48,192")
    batch_size, batch = request.batch_size_for(preset), None
    check_fits(theory_bytes(config.replace(n_layers=max(layer_counts)), batch_size, request.attention_heads,
                            request.token_resolved),
               f"predicting {max(layer_counts)} layers")
    batched = request.data is not None or request.real or request.synthetic or config.input == "patches"
    if request.token_resolved and not batched:  # a request no scheme can meet, as predict says
        raise ValueError("--token-resolved: not available without a batch (no token ids given): add --data or "
                         "--real")
    if batched:
        config, batch = _batch(config, request, batch_size, progress, [])
    tick = tasks(progress).task(f"predict {len(names)} schemes × {len(layer_counts)} depths",
                                sweep_steps(config, names, layer_counts, batch, request.token_resolved))
    rows = sweep_inits(config, names, layer_counts, attention_heads=request.attention_heads, progress=tick,
                       batch=batch, token_resolved=request.token_resolved)
    orders = depth_orders(rows)
    run = InitsRun(config, rows, orders, layer_counts)
    if request.json is not None:
        run.written.append(("JSON", write_json_atomic(request.json, sweep_json(config, rows, orders))))
    if request.plot is not None:
        title = f"{request.title('model')}: init schemes against depth (theory)"
        run.written.append(("figure", plot_init_sweep(request.plot, rows, title=title)))
    return run
