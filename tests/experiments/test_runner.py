"""The experiment runner: the tuning runs, the best rate's other seeds, each run's fate, skipping what finished,
resuming what was interrupted, the table and the figure; bad input refused before any run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sigprop.experiments import catalog
from sigprop.experiments.run import run_experiment
from sigprop.experiments.spec import Experiment, ModelSpec, Scale, non_embedding_parameters, plan_runs
from sigprop.model.config import TransformerConfig
from tests.cli.test_front_door import refused
from tests.helpers import processes_mentioning

TINY = dict(arch="decoder", vocab_size=300, seq_len=16, max_len=16, dropout=0.0, init="dslm")
TRAIN = dict(batch_size=4, warmup_steps=1, eval_every=4, eval_batches=1, checkpoint_every=4)


def _experiment(corpus, lrs=(3e-3, 1e-2), tokens_per_parameter=0.3, seeds=2, stall_margin=-10.0):
    scale = Scale(models=(ModelSpec("2x16", dict(n_layers=2, d_model=16, n_heads=1), lrs),),
                  base_model=TINY, train={**TRAIN, "data": str(corpus)},
                  tokens_per_parameter=tokens_per_parameter, seeds=seeds, note="a test")
    return Experiment("tiny", "does the runner work?", "none", {"cpu": scale}, stall_margin=stall_margin)


#: The command the finished tiny experiment of :func:`finished` records.
FIRST_COMMAND = "the command"


@pytest.fixture(scope="module")
def finished(corpus, tmp_path_factory):
    """The tiny experiment (two rates, two seeds) run once, two runs at a time, for the module's tests: its result
    and its folder, which they only read (a test that runs into it again works on a copy)."""
    out = tmp_path_factory.mktemp("finished") / "e"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(catalog.EXPERIMENTS, "tiny", _experiment(corpus))
        result = run_experiment("tiny", out=out, workers=2, say=lambda s: None, command=FIRST_COMMAND)
    return result, out


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


@pytest.fixture
def tiny(corpus, monkeypatch):
    def register(**kw):
        e = _experiment(corpus, **kw)
        monkeypatch.setitem(catalog.EXPERIMENTS, "tiny", e)
        return e

    return register


def test_non_embedding_parameters_count_the_layers_and_the_final_norm():
    from sigprop.model.transformer import Transformer

    for n, d in ((2, 64), (8, 32)):
        c = TransformerConfig(**{**TINY, "n_layers": n, "d_model": d, "n_heads": 2})
        m = Transformer(c)
        layers = sum(p.numel() for p in m.layers.parameters()) + sum(p.numel() for p in m.final_norm.parameters())
        assert non_embedding_parameters(c) == layers


def test_runs_see_the_tokens_per_parameter_asked(corpus):
    e = _experiment(corpus, tokens_per_parameter=4.0)
    runs = plan_runs(e, "cpu")
    assert [(r.seed, r.lr, r.tuning) for r in runs] == [(0, 3e-3, True), (0, 1e-2, True)]
    config = TransformerConfig(**{**TINY, "n_layers": 2, "d_model": 16, "n_heads": 1})
    tokens = runs[0].train_config["steps"] * 4 * 16
    assert 4.0 <= tokens / non_embedding_parameters(config) < 4.0 + 64 / non_embedding_parameters(config)
    assert [r.seed for r in plan_runs(e, "cpu", 3, {"2x16": 1e-2})] == [1, 2]
    assert len({r.run_id for r in runs}) == 2


@pytest.mark.long
def test_an_experiment_tunes_then_runs_the_seeds_then_skips_what_finished(finished, tiny, tmp_path):
    tiny()
    result, folder = finished
    _copy(folder, tmp_path / "e")
    rows = result.summary["rows"]
    assert len(rows) == 1 and set(rows[0]["lr_grid"]) == {"0.003", "0.01"}
    best = rows[0]["best_lr"]
    grid = rows[0]["lr_grid"]
    assert grid[f"{best:g}"] == min(grid.values())  # the best rate is the tuning run's lowest final loss
    assert rows[0]["seeds"] == 2 and rows[0]["final_val_se"] is not None
    assert {p.name for p in result.files} == {"results.json", "table.md", "figure.png"}
    assert "| 2x16 |" in (tmp_path / "e" / "table.md").read_text()
    again = []
    run_experiment("tiny", out=tmp_path / "e", workers=2, say=again.append)
    assert not any(line.startswith("start") for line in again)
    assert json.loads((tmp_path / "e" / "results.json").read_text())["rows"] == result.summary["rows"]


@pytest.mark.long
def test_fates_diverged_and_stalled_are_recorded(tiny, tmp_path):
    tiny(lrs=(1000.0,), stall_margin=10.0)  # lr 1000 diverges or, if not, a 10-nat margin calls it stalled
    result = run_experiment("tiny", out=tmp_path / "e", workers=1, train_overrides=["clip=none"],
                            say=lambda s: None)
    runs = result.summary["runs"]
    assert len(runs) == 1 and runs[0]["fate"] in ("diverged", "stalled")
    if runs[0]["fate"] == "diverged":
        assert "not finite" in runs[0]["detail"]
    assert result.summary["rows"][0]["best_lr"] is None and result.summary["rows"][0]["seeds"] == 0


@pytest.mark.parametrize("last", [float("nan"), float("inf")])
def test_a_run_whose_last_validation_loss_is_not_finite_is_diverged_not_judged_on_an_earlier_one(tmp_path, last):
    from sigprop.experiments.runner import _judge
    from sigprop.experiments.spec import RunSpec
    from sigprop.train.run_dir import MetricsLog

    log = MetricsLog(tmp_path)
    log.write({"step": 1000, "tokens": 100, "loss": 3.9, "val_loss": 3.8})
    log.write({"step": 2000, "tokens": 200, "loss": 3.7, "val_loss": last})  # logged as null
    log.close()
    result = _judge(RunSpec("m", {}, {}, 0, 1e-3, True), tmp_path, 0, tmp_path / "none.log", unigram=6.0,
                    margin=0.1, wall=1.0)
    assert (result.fate, result.final_val) == ("diverged", None)
    assert "step 2000" in result.detail
    finite = tmp_path / "finite"
    finite.mkdir()
    log = MetricsLog(finite)
    log.write({"step": 1000, "tokens": 100, "loss": 3.9, "val_loss": 3.8})
    log.write({"step": 2000, "tokens": 200, "loss": 3.7, "val_loss": 3.6})
    log.close()
    result = _judge(RunSpec("m", {}, {}, 0, 1e-3, True), finite, 0, tmp_path / "none.log", unigram=6.0,
                    margin=0.1, wall=1.0)
    assert (result.fate, result.final_val) == ("trained", 3.6)


@pytest.mark.long
def test_sigterm_stops_the_runs_which_resume_next_time(corpus, tmp_path):
    out = tmp_path / "smoke"
    args = ["experiment", "smoke", "--train-set", f"data={corpus}", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-m", "sigprop", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(out.glob("*/metrics.jsonl")):
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "interrupted" in err and "Traceback" not in err
    assert not list(out.glob("*/fate.json")) or len(list(out.glob("*/fate.json"))) < 6
    assert processes_mentioning(str(out)) == []  # no run left behind
    interrupted = [d for d in out.iterdir() if (d / "run.json").exists() and not (d / "fate.json").exists()]
    assert interrupted  # to be resumed by the next invocation


@pytest.mark.long
def test_runs_stop_when_the_runner_is_killed(corpus, tmp_path):
    out = tmp_path / "killed"
    wider = ["--set", "n_layers=6", "--set", "d_model=64", "--set", "n_heads=2"]  # runs of minutes, not seconds
    proc = subprocess.Popen([sys.executable, "-m", "sigprop", "experiment", "smoke", "--train-set", f"data={corpus}",
                             *wider, "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.glob("*/metrics.jsonl")):
        time.sleep(0.1)
    proc.kill()  # SIGKILL: the runner cannot pass anything on
    proc.wait()
    deadline = time.monotonic() + 15  # a run finishes its step, checkpoints and exits
    while time.monotonic() < deadline and processes_mentioning(str(out)):
        time.sleep(0.2)
    assert processes_mentioning(str(out)) == []


def test_a_run_keeps_the_runner_s_session_and_priority_in_a_process_group_of_its_own(tmp_path):
    from sigprop.experiments.runner import _spawn

    probe = ("import json, os, pathlib; a = pathlib.Path('/proc/self/autogroup'); "
             "print(json.dumps([os.getpid(), os.getsid(0), os.getpgid(0), os.nice(0), "
             "a.read_text().split(' nice')[0] if a.exists() else None]))")
    with open(tmp_path / "log", "w", encoding="utf-8") as log:
        proc = _spawn([sys.executable, "-c", probe], log, dict(os.environ))
        assert proc.wait(timeout=60) == 0
    pid, sid, pgid, nice, group = json.loads((tmp_path / "log").read_text())
    assert sid == os.getsid(0)  # the runner's session: Linux's autogroup, hence `nice sigprop experiment`, holds
    assert pgid == pid  # a group of its own: a terminal's Ctrl-C reaches the runner alone, which passes it on
    assert nice == os.nice(0)
    here = Path("/proc/self/autogroup")
    if here.exists():
        assert group == here.read_text().split(" nice")[0]


@pytest.mark.parametrize(("args", "needle"), [
    (["experiment", "no-such"], "unknown experiment"),
    (["experiment"], "name an experiment"),
    (["experiment", "smoke", "--scale", "huge"], "--scale"),
    (["experiment", "depth", "--scale", "paper"], "not run here"),
    (["experiment", "smoke", "--seeds", "0"], "--seeds"),
    (["experiment", "smoke", "--workers", "0"], "--workers"),
    (["experiment", "smoke", "--device", "tpu"], "--device"),
    (["experiment", "smoke", "--set", "n_layers=0"], "n_layers"),
    (["experiment", "smoke", "--train-set", "lr=-1"], "lr"),
    (["experiment", "smoke", "--model", "nope*"], "matches no model"),
    (["experiment", "fp8", "--model", "*"], "--model selects"),
])
def test_bad_input_is_refused_before_any_run(tmp_path, args, needle):
    refused([*args, "--out", str(tmp_path / "e")], needle)
    assert not (tmp_path / "e").exists()


def test_every_experiment_plans_valid_runs_at_every_scale():
    from sigprop.experiments.run import estimate

    for name, experiment in catalog.EXPERIMENTS.items():
        for scale in experiment.scales:
            runs = plan_runs(experiment, scale)
            assert runs and len({r.run_id for r in runs}) == len(runs), (name, scale)
            for run in runs:
                TransformerConfig(**run.model_config)  # every config valid
                assert run.train_config["steps"] >= 1 and run.tuning
            cost = estimate(name, scale)
            if experiment.runs_from is None:
                assert cost["runs"] >= len(runs)
            else:  # trains nothing of its own: the source's runs are its models
                assert cost["runs"] == 0 and cost["evaluates"] == experiment.runs_from in catalog.EXPERIMENTS


def test_a_model_s_own_training_fields_apply_to_its_runs_only():
    runs = plan_runs(catalog.get_experiment("divergence"), "cpu")
    warmups = {r.model_name: r.train_config["warmup_steps"] for r in runs}
    assert warmups["32x32 xavier post-LN, no warmup"] == 0 and warmups["32x32 xavier post-LN"] == 100


def _tuned(model: str, lr: float, final: float | None):
    from sigprop.experiments.runner import RunResult

    fate = "trained" if final is not None else "stalled"
    return RunResult(f"{model}-{lr:g}", model, 0, lr, True, fate, "", final, 1, 1, 1.0, [])


def test_a_best_rate_at_an_edge_of_the_grid_extends_the_grid_past_that_edge():
    from sigprop.experiments.spec import edge_rates

    models = (ModelSpec("a", {}, (1e-3, 2e-3, 4e-3)), ModelSpec("b", {}, (1e-3, 3e-3)),
              ModelSpec("c", {}, (1e-3, 2e-3)))
    scale = Scale(models=models, base_model={}, train={}, tokens_per_parameter=1.0, grid_extensions=2)
    inside = [_tuned("a", 1e-3, 3.0), _tuned("a", 2e-3, 2.0), _tuned("a", 4e-3, 2.5)]
    assert edge_rates(scale, inside) == {}  # an interior optimum: the tuning is complete
    top = [_tuned("a", 1e-3, 3.0), _tuned("a", 2e-3, 2.5), _tuned("a", 4e-3, 2.0)]
    assert edge_rates(scale, top) == {"a": (8e-3,)}  # up by the grid's top step
    assert edge_rates(scale, [*top, _tuned("a", 8e-3, 1.9)]) == {"a": (1.6e-2,)}
    spent = [*top, _tuned("a", 8e-3, 1.9), _tuned("a", 1.6e-2, 1.8)]
    assert edge_rates(scale, spent) == {}  # two past the edge: no more
    assert edge_rates(replace(scale, grid_extensions=0), top) == {}
    bottom = [_tuned("b", 1e-3, 2.0), _tuned("b", 3e-3, None)]  # the top stalled; the best is the bottom
    assert edge_rates(scale, bottom) == {"b": (3.33e-4,)}  # down by the bottom step, three significant digits
    assert edge_rates(scale, [_tuned("c", 1e-3, None), _tuned("c", 2e-3, None)]) == {}  # nothing trained


def test_a_model_that_trains_at_no_rate_tries_lower_rates_where_the_scale_says_so():
    from sigprop.experiments.spec import edge_rates

    models = (ModelSpec("c", {}, (1e-3, 2e-3)), ModelSpec("d", {}, (1e-3, 2e-3)))
    scale = Scale(models=models, base_model={}, train={}, tokens_per_parameter=1.0, grid_extensions=2,
                  lower_when_none_trains=True)
    stalled = [_tuned("c", 1e-3, None), _tuned("c", 2e-3, None)]
    assert edge_rates(scale, stalled) == {"c": (5e-4,)}  # below the lowest, by the bottom step
    assert edge_rates(scale, [*stalled, _tuned("c", 5e-4, None)]) == {"c": (2.5e-4,)}
    assert edge_rates(scale, [*stalled, _tuned("c", 5e-4, None), _tuned("c", 2.5e-4, None)]) == {}  # spent
    # a rate scores only where every tuning seed trained: one seed of two trained is not a rate that trained
    mixed = [_tuned("d", 1e-3, 3.0), _tuned("d", 1e-3, None), _tuned("d", 2e-3, None)]
    assert edge_rates(scale, mixed) == {"d": (5e-4,)}
    one = [_tuned("d", 2e-3, None)]
    assert edge_rates(replace(scale, models=(ModelSpec("d", {}, (2e-3,)),)), one) == {"d": (1e-3,)}  # never up
    assert edge_rates(replace(scale, grid_extensions=0), stalled) == {}
    # a model that trained somewhere keeps the edge rule, either way
    assert edge_rates(scale, [_tuned("c", 1e-3, 2.0), _tuned("c", 2e-3, None)]) == {"c": (5e-4,)}
    assert edge_rates(scale, [_tuned("c", 1e-3, None), _tuned("c", 2e-3, 2.0)]) == {"c": (4e-3,)}


def test_the_extended_rates_are_tuning_runs_of_their_own(corpus):
    e = _experiment(corpus)
    extra = plan_runs(e, "cpu", extra_lrs={"2x16": (2e-2,)})
    assert [(r.seed, r.lr, r.tuning) for r in extra] == [(0, 2e-2, True)]
    assert extra[0].run_id not in {r.run_id for r in plan_runs(e, "cpu")}


@pytest.mark.long
def test_finished_runs_of_identical_spec_are_copied_from_another_experiment(finished, tiny, tmp_path):
    """``--runs-dir`` for an experiment that trains: a run finished in the other folder under the same id (a digest
    of both configs) is copied in whole, not trained again; a run that other folder lacks is trained."""
    first, folder = finished
    tiny(lrs=(3e-3, 1e-2, 3e-2))  # one more rate: the two shared runs are reused, the new one trained
    said = []
    second = run_experiment("tiny", out=tmp_path / "b", workers=2, runs_dir=folder, say=said.append)
    started = [line for line in said if line.startswith("start")]
    assert any("copied from" in line for line in said)
    shared = {r["run_id"] for r in first.summary["runs"]}
    assert not any(run_id in line for line in started for run_id in shared)
    assert any("lr0.03-" in line for line in started)
    for run_id in shared & {r["run_id"] for r in second.summary["runs"]}:
        fate = run_id + "/fate.json"
        assert (tmp_path / "b" / fate).read_bytes() == (folder / fate).read_bytes()
        assert list((tmp_path / "b" / run_id).glob("ckpt-*.safetensors"))  # whole: checkpoints too (for fp8)
    assert not list((tmp_path / "b").glob(".*.copying"))


def test_runs_share_the_gpus_in_turn(monkeypatch):
    from sigprop.experiments.runner import _gpu_for

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [_gpu_for(k, 1) for k in range(3)] == ["0", "0", "0"]
    assert [_gpu_for(k, 2) for k in range(4)] == ["0", "1", "0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # the GPUs this process was given, in their order
    assert [_gpu_for(k, 2) for k in range(3)] == ["3", "5", "3"]


@pytest.mark.parametrize("scale", ["cpu", "gpu"])
def test_divergence_shares_its_post_ln_runs_with_depth(scale):
    """The Post-LN Xavier and DSLM runs at the deepest shape are the same runs in both experiments (same ids), so
    ``divergence --runs-dir <depth's folder>`` reuses them."""
    depth = {r.run_id for r in plan_runs(catalog.get_experiment("depth"), scale)}
    divergence = {r.run_id for r in plan_runs(catalog.get_experiment("divergence"), scale)}
    shared = depth & divergence
    assert len(shared) == 3 and all("post-LN-lr" in run_id for run_id in shared)


def test_model_patterns_select_models_whose_runs_keep_their_ids():
    from sigprop.experiments.run import _only

    depth = catalog.get_experiment("depth")
    chosen = _only(depth, "gpu", ["2x256 xavier *", "*dslm pre-LN"])
    names = [m.name for m in chosen.scale("gpu").models]
    assert sorted(names) == ["2x256 xavier post-LN", "2x256 xavier pre-LN", "32x64 dslm pre-LN", "8x128 dslm pre-LN"]
    every = {r.run_id for r in plan_runs(depth, "gpu")}
    some = {r.run_id for r in plan_runs(chosen, "gpu")}
    assert some < every and len(some) == 3 * len(names)
    assert chosen.scale("cpu") == depth.scale("cpu")  # the other scales untouched


@pytest.mark.long
def test_the_table_holds_every_finished_run_in_the_folder_whichever_invocation_ran_it(corpus, tmp_path,
                                                                                      monkeypatch):
    """Two ``--model`` invocations into one folder give one table of both models; a run of other configs in the
    folder (``--set``) stays out of it."""
    scale = Scale(models=(ModelSpec("a", dict(n_layers=2, d_model=16, n_heads=1), (3e-3,)),
                          ModelSpec("b", dict(n_layers=3, d_model=16, n_heads=1), (3e-3,))),
                  base_model=TINY, train={**TRAIN, "data": str(corpus)}, tokens_per_parameter=0.3, seeds=1,
                  note="a test")
    monkeypatch.setitem(catalog.EXPERIMENTS, "tiny", Experiment("tiny", "?", "none", {"cpu": scale},
                                                                stall_margin=-10.0))
    out = tmp_path / "e"
    quiet = dict(workers=1, say=lambda s: None)
    run_experiment("tiny", out=out, models=["a"], overrides=["dropout=0.1"], **quiet)  # other configs
    first = run_experiment("tiny", out=out, models=["a"], **quiet)
    assert [r["seeds"] for r in first.summary["rows"]] == [1, 0]
    second = run_experiment("tiny", out=out, models=["b"], **quiet)
    rows = {r["model"]: r for r in second.summary["rows"]}
    assert rows["a"]["seeds"] == 1 and rows["b"]["seeds"] == 1
    assert rows["a"]["final_val_mean"] == first.summary["rows"][0]["final_val_mean"]
    assert len(second.summary["runs"]) == 2 and len(list(out.glob("*/fate.json"))) == 3
    table = (out / "table.md").read_text()
    assert "| a |" in table and "| b |" in table


def test_the_cpu_cost_estimate_is_near_the_measured_wall_time_of_the_finished_experiments():
    """``--list``'s core-hours come from a rate per token that, against the wall time per run stored in
    ``docs/results/experiments/*/results.json`` (two runs at a time on the 2-core machine), is within a factor 1.5
    either way for each model and within 20% on average."""
    from sigprop.experiments.run import _config, cpu_seconds_per_token

    docs = Path(__file__).resolve().parents[2] / "docs" / "results" / "experiments"
    ratios = []
    for name in ("depth", "divergence", "shaped"):
        scale = catalog.get_experiment(name).scale("cpu")
        stored = json.loads((docs / name / "results.json").read_text(encoding="utf-8"))
        for row in stored["rows"]:
            if row["wall_per_run_s"]:
                model = next(m for m in scale.models if m.name == row["model"])
                measured = row["wall_per_run_s"] / row["tokens_per_run"]
                ratios.append(measured / cpu_seconds_per_token(_config(scale, model)))
    assert len(ratios) >= 15 and all(1 / 1.5 < r < 1.5 for r in ratios), ratios
    assert abs(np.mean(ratios) - 1) < 0.2


@pytest.mark.long
def test_kept_records_let_an_experiment_continue_without_training_its_finished_runs_again(finished, tiny, tmp_path):
    """``bench/experiment_records.py`` keeps each finished run's fate, configs and track (no checkpoints) and names
    its files relative to the experiment folder; a fresh folder given those records as ``--runs-dir`` trains nothing
    again and tables the same rows."""
    tiny()
    first, folder = finished
    script = Path(__file__).resolve().parents[2] / "bench" / "experiment_records.py"
    done = subprocess.run([sys.executable, str(script), str(folder), str(tmp_path / "records")],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(script.parents[1])})
    assert done.returncode == 0, done.stderr
    kept = sorted(p.name for p in (tmp_path / "records").iterdir())
    assert kept == sorted(r["run_id"] for r in first.summary["runs"])
    assert not list((tmp_path / "records").glob("*/ckpt-*"))
    commands = {p.parent.name: json.loads(p.read_text())["command"] for p in (tmp_path / "records").glob("*/run.json")}
    assert sorted(commands) == kept and not any(str(folder.parent) in c for c in commands.values()), commands
    assert all(f"--config specs/{run_id}.json --out {run_id} " in c for run_id, c in commands.items()), commands
    said = []
    again = run_experiment("tiny", out=tmp_path / "b", workers=2, runs_dir=tmp_path / "records", say=said.append)
    assert not any(line.startswith("start") for line in said)
    assert again.summary["rows"] == first.summary["rows"]


@pytest.mark.long
def test_a_run_of_identical_configs_is_shared_whatever_the_model_is_called(finished, corpus, tmp_path,
                                                                          monkeypatch):
    """``ablations`` calls DSLM Post-LN at 32 × 32 "post-LN dslm, beta^2=2/N fixed", ``divergence`` "32x32 dslm
    post-LN": one run, copied under this experiment's name (its fate says where from); of several ``--runs-dir``
    folders each is searched."""
    first = _experiment(corpus)
    folder = finished[1]
    scale = first.scale("cpu")
    renamed = replace(scale, models=(replace(scale.models[0], name="the same model"),))
    monkeypatch.setitem(catalog.EXPERIMENTS, "tiny", replace(first, scales={"cpu": renamed}))
    (tmp_path / "empty").mkdir()
    said = []
    second = run_experiment("tiny", out=tmp_path / "b", workers=2, runs_dir=[tmp_path / "empty", folder],
                            say=said.append)
    assert not any(line.startswith("start") for line in said)
    copied = [json.loads(p.read_text()) for p in (tmp_path / "b").glob("*/fate.json")]
    assert sum("copied_from" in f for f in copied) == 3  # two tuning runs and the second seed
    assert all(f["model_name"] == "the same model" and f["run_id"].startswith("the-same-model-") for f in copied)
    assert second.summary["rows"][0]["seeds"] == 2


def test_ablations_and_prior_methods_share_dslm_runs_with_depth_s_kept_records():
    """The DSLM models at 32 × 32 are the same configs under other names: every DSLM tuning run of ``ablations`` and
    ``prior-methods`` (Post-LN at (1, 2, 4)·10⁻³, Pre-LN at (0.8, 1.6, 3.2)·10⁻²) is among ``depth``'s finished runs
    (its grid extensions included) kept in docs/results/experiments/depth/runs, under the same digest."""
    records = Path(__file__).resolve().parents[2] / "docs" / "results" / "experiments" / "depth" / "runs"
    kept = {p.name.rsplit("-lr", 1)[1] for p in records.iterdir()}

    def tails(name):
        return {r.run_id.rsplit("-lr", 1)[1] for r in plan_runs(catalog.get_experiment(name), "cpu")}

    assert len(tails("ablations") & kept) == 6
    assert tails("prior-methods") & kept == tails("ablations") & kept


@pytest.mark.long
def test_table_only_tabulates_the_finished_runs_and_trains_nothing(finished, tiny, tmp_path):
    tiny()
    first, folder = finished
    _copy(folder, tmp_path / "e")
    (tmp_path / "e" / "table.md").unlink()
    said = []
    again = run_experiment("tiny", out=tmp_path / "e", say=said.append, command="a table", train=False)
    assert not any(line.startswith("start") for line in said) and not again.stopped
    assert again.summary["rows"] == first.summary["rows"] and again.summary["command"] == FIRST_COMMAND
    assert "| 2x16 |" in (tmp_path / "e" / "table.md").read_text()
    with pytest.raises(ValueError, match="no such folder"):
        run_experiment("tiny", out=tmp_path / "none", train=False)


def test_the_figure_legend_counts_seeds_and_keeps_models_that_trained_at_no_rate():
    from sigprop.experiments.summary import curve_label

    assert curve_label("pre-LN dslm", 0.016, 1) == "pre-LN dslm (lr 0.016, 1 seed)"
    assert curve_label("pre-LN dslm", 0.016, 2) == "pre-LN dslm (lr 0.016, 2 seeds)"
    assert curve_label("post-LN xavier", None, 0) == "post-LN xavier: no run trained"


def test_set_overrides_keep_a_model_s_own_tokens_per_parameter():
    from sigprop.experiments.run import _with_overrides

    depth = catalog.get_experiment("depth")
    scale = depth.scale("cpu")
    first = scale.models[0]
    longer = replace(first, name=first.name + ", 40 tokens/param", tokens_per_parameter=40.0)
    experiment = replace(depth, scales={"cpu": replace(scale, models=(first, longer))})
    steps = {r.model_name: r.train_config["steps"] for r in plan_runs(experiment, "cpu")}
    overridden = _with_overrides(experiment, "cpu", ["dropout=0.0"], [])  # the scale's own value: nothing else changes
    assert {r.model_name: r.train_config["steps"] for r in plan_runs(overridden, "cpu")} == steps
    assert steps[longer.name] > 1.9 * steps[first.name]
