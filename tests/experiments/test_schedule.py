"""The schedule: each model tuned, extended and given its other seeds as soon as its own runs allow, the same runs as
deciding stage by stage over the whole experiment, in the order that settles models (and a ladder's rungs) first."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest

from sigprop.experiments import catalog
from sigprop.experiments.runner import RunResult
from sigprop.experiments.schedule import Schedule
from sigprop.experiments.spec import Experiment, ModelSpec, Scale, edge_rates, plan_runs
from sigprop.experiments.summary import best_learning_rates

BASE = dict(arch="decoder", vocab_size=300, seq_len=16, max_len=16, dropout=0.0)


def _experiment(optima: dict[str, float], groups: dict[str, int] | None = None, extensions: int = 3) -> Experiment:
    """Models named by their optimum's position: each a 2-layer model of its own width over the rates 1e-3·√2^k,
    k = -1, 0, 1."""
    models = tuple(ModelSpec(name, dict(n_layers=2, d_model=8 * (i + 1), n_heads=1), (7.07e-4, 1e-3, 1.41e-3),
                             group=(groups or {}).get(name, 0))
                   for i, name in enumerate(optima))
    scale = Scale(models=models, base_model=BASE, train=dict(batch_size=2), tokens_per_parameter=None, seeds=3,
                  tuning_seeds=2, grid_extensions=extensions, lr_step=math.sqrt(2.0), lr_anchor=1e-3)
    return Experiment("sim", "?", "none", {"cpu": scale})


def _loss(optima: dict[str, float], run, stalled: frozenset = frozenset()) -> RunResult:
    """A run's result from a loss that is lowest at its model's optimum rate (a parabola in log rate, plus a
    seed's offset); a (model, rate) in ``stalled`` stalls."""
    x = math.log(run.lr / optima[run.model_name])
    final = None if (run.model_name, run.lr) in stalled else 3.0 + x * x + 0.01 * run.seed
    return RunResult(run.run_id, run.model_name, run.seed, run.lr, run.tuning, "trained" if final else "stalled",
                     "", final, 1, 1, 1.0, [])


def _by_stages(experiment: Experiment, optima, stalled=frozenset()) -> set[str]:
    """The run ids the stage-by-stage rule trains: every tuning run, then grid extensions over the whole experiment
    until none is proposed, then the other seeds at each model's best rate."""
    scale = experiment.scale("cpu")
    results = [_loss(optima, r, stalled) for r in plan_runs(experiment, "cpu")]
    while extra := edge_rates(scale, results):
        results += [_loss(optima, r, stalled) for r in plan_runs(experiment, "cpu", extra_lrs=extra)]
    results += [_loss(optima, r, stalled) for r in plan_runs(experiment, "cpu", best_lr=best_learning_rates(results))]
    return {r.run_id for r in results}


def _scheduled(experiment: Experiment, optima, workers: int, seed: int, stalled=frozenset()) -> tuple[set, list]:
    """Run ids the schedule asks for, finishing runs ``workers`` at a time in a random order of completion; and
    the order in which runs started."""
    schedule, finished, running, started = Schedule(experiment, "cpu", None, say=lambda s: None), {}, [], []
    rng = random.Random(seed)
    while True:
        todo = [r for r in schedule(finished) if r.run_id not in finished and r not in running]
        while todo and len(running) < workers:
            running.append(todo.pop(0))
            started.append(running[-1])
        if not running:
            return set(finished), started
        done = running.pop(rng.randrange(len(running)))
        finished[done.run_id] = _loss(optima, done, stalled)


OPTIMA = {"interior": 1e-3, "high": 2e-3, "low": 5e-4, "far": 1.0}


@pytest.mark.parametrize("workers", [1, 2, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_schedule_trains_the_same_runs_as_deciding_stage_by_stage(workers, seed):
    experiment = _experiment(OPTIMA)  # interior, extended up twice, down twice, up until the extensions are spent
    expected = _by_stages(experiment, OPTIMA)
    got, _ = _scheduled(experiment, OPTIMA, workers, seed)
    assert got == expected
    assert len(expected) == 4 * 6 + 2 * (2 + 2 + 3) + 4  # grids, extensions (two seeds each), third seeds


def test_a_model_whose_runs_stall_gets_the_same_runs_too():
    stalled = frozenset({("high", 1.41e-3), ("interior", 7.07e-4), ("interior", 1e-3), ("interior", 1.41e-3)})
    experiment = _experiment(OPTIMA)
    assert _scheduled(experiment, OPTIMA, 2, 0, stalled)[0] == _by_stages(experiment, OPTIMA, stalled)


def test_a_model_that_trains_at_no_rate_tries_lower_rates_the_same_way_where_the_scale_lowers_grids():
    stalled = frozenset({("interior", lr) for lr in (3.54e-4, 5e-4, 7.07e-4, 1e-3, 1.41e-3)})
    base = _experiment({"interior": 1e-3}, extensions=2)
    scale = dataclasses.replace(base.scale("cpu"), lower_when_none_trains=True)
    experiment = dataclasses.replace(base, scales={"cpu": scale})
    got, _ = _scheduled(experiment, OPTIMA, 2, 0, stalled)
    assert got == _by_stages(experiment, OPTIMA, stalled)
    tried = sorted({float(run_id.split("-lr")[1].split("-s")[0]) for run_id in got})
    assert tried == [3.54e-4, 5e-4, 7.07e-4, 1e-3, 1.41e-3]  # two below the grid, then settled with no best rate
    assert len(got) == 5 * 2  # two tuning seeds at each, no third seed (no best rate)
    kept = _experiment({"interior": 1e-3}, extensions=2)  # the default: such a model's grid stays as it is
    assert {float(i.split("-lr")[1].split("-s")[0]) for i in _scheduled(kept, OPTIMA, 2, 0, stalled)[0]} == {
        7.07e-4, 1e-3, 1.41e-3}


def test_a_model_settles_without_waiting_for_the_others():
    optima = {"a": 1e-3, "b": 1e-3}
    experiment = _experiment(optima)
    schedule = Schedule(experiment, "cpu", None, say=lambda s: None)
    first = schedule({})
    assert all(r.tuning for r in first) and len(first) == 12
    finished = {r.run_id: _loss(optima, r) for r in first if r.model_name == "a"}  # b has not started
    runs = schedule(finished)
    seeds = [r for r in runs if not r.tuning]
    assert [(r.model_name, r.seed, r.lr) for r in seeds] == [("a", 2, 1e-3)]
    pending = [r for r in runs if r.run_id not in finished]
    assert pending[0] == seeds[0]  # a settled model's other seed starts before the other model's tuning runs


def test_an_edge_proposes_the_next_lattice_rate_once_and_says_so():
    optima = {"a": 4e-3}
    said: list[str] = []
    schedule = Schedule(_experiment(optima), "cpu", None, say=said.append)
    finished = {r.run_id: _loss(optima, r) for r in schedule({})}
    runs = schedule(finished)
    new = [r for r in runs if r.run_id not in finished]
    assert [(r.lr, r.seed, r.tuning) for r in new] == [(2e-3, 0, True), (2e-3, 1, True)]
    assert said == ["best rate at the edge of the grid tried: a tries 0.002"]
    assert schedule(finished) == runs and len(said) == 1  # asked again with nothing new: nothing new


def test_a_ladder_starts_its_smallest_rung_first_and_settles_it_before_the_next():
    ladder = catalog.get_experiment("shape-ladder")
    schedule = Schedule(ladder, "cpu", None, say=lambda s: None)
    runs = schedule({})
    rungs = [int(r.model_name.split(":")[0].removeprefix("d=")) for r in runs]
    assert rungs == sorted(rungs) and rungs[0] == 64
    rung_64 = [r for r in runs if r.model_name.startswith("d=64:")]
    optima = {m.name: sorted(m.lrs)[1] for m in ladder.scale("cpu").models}  # each grid's middle rate best
    finished = {r.run_id: _loss(optima, r) for r in rung_64}
    pending = [r for r in schedule(finished) if r.run_id not in finished]
    assert [r.model_name for r in pending[:3]] == [m.name for m in ladder.scale("cpu").models[:3]]
    assert not any(r.tuning for r in pending[:3]) and pending[3].model_name.startswith("d=96:")


def test_group_is_not_part_of_a_run_id():
    a = plan_runs(_experiment({"m": 1e-3}), "cpu")
    b = plan_runs(_experiment({"m": 1e-3}, groups={"m": 7}), "cpu")
    assert [r.run_id for r in a] == [r.run_id for r in b]


def _run_simulated(monkeypatch, tmp_path, experiment, judge, exit_code=lambda spec: 0, workers=1, out="out"):
    """The runner over ``experiment``, each run a process that exits at once with ``exit_code(spec)`` (its folder made
    as a run's would be, unless a signal stopped it) and is judged ``judge(spec)``: (results, stopped, what it said)."""
    import subprocess
    import sys
    import time

    from sigprop.experiments import runner

    def launch(spec, folder, device, slot, gpus=1):
        code = exit_code(spec)
        log = open(tmp_path / f"{spec.run_id}.log", "w")  # noqa: SIM115 - the runner closes it
        if code != 143:
            (folder / spec.run_id).mkdir(parents=True, exist_ok=True)
        return runner._Launched(spec, subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"]), log,
                                time.perf_counter())

    monkeypatch.setattr(runner, "_launch", launch)
    monkeypatch.setattr(runner, "_judge", lambda spec, *args: judge(spec))
    said: list[str] = []
    results, stopped = runner.execute(Schedule(experiment, "cpu", None, say=said.append), tmp_path / out, workers,
                                      "cpu", {"a": 5.0}, 0.1, say=said.append)
    return results, stopped, said


def test_a_run_stopped_from_outside_leaves_its_model_unsettled_and_says_so(tmp_path, monkeypatch):
    optima = {"a": 1e-3}
    experiment = _experiment(optima)
    killed = plan_runs(experiment, "cpu")[0]  # stopped from outside (SIGTERM's exit 143); the others finish at once
    results, stopped, said = _run_simulated(monkeypatch, tmp_path, experiment, lambda spec: _loss(optima, spec),
                                            lambda spec: 143 if spec.run_id == killed.run_id else 0, workers=2)
    assert not stopped and len(results) == 5  # the grid's other five runs; no third seed without the sixth
    assert killed.run_id not in {r.run_id for r in results}
    assert any("a signal the runner did not send" in line and "; a wait(s) for them" in line for line in said)


def test_a_run_copied_in_takes_this_experiment_s_role(tmp_path):
    from sigprop.experiments.runner import FATE_FILE, _reuse

    optima = {"a": 1e-3}
    run = plan_runs(_experiment(optima), "cpu")[0]
    other = tmp_path / "other" / run.run_id  # another experiment ran the same configs as a seed at its best rate
    other.mkdir(parents=True)
    fate = dataclasses.asdict(_loss(optima, run))
    (other / FATE_FILE).write_text(json.dumps({**fate, "tuning": False}))
    copied = _reuse(run, tmp_path / "out", [tmp_path / "other"])
    assert copied["tuning"] is True and copied["copied_from"] == f"other/{run.run_id}"


def test_a_proposal_of_rates_already_tried_settles_the_model(monkeypatch):
    from sigprop.experiments import schedule as module

    optima = {"a": 1e-3}
    experiment = _experiment(optima)
    schedule = Schedule(experiment, "cpu", None, say=lambda s: None)
    finished = {r.run_id: _loss(optima, r) for r in schedule({})}
    monkeypatch.setattr(module, "edge_rates", lambda scale, results: {"a": (1e-3,)})  # a rate of its own grid
    seeds = [r for r in schedule(finished) if not r.tuning]
    assert [(r.seed, r.lr) for r in seeds] == [(2, 1e-3)]


def test_a_run_found_on_disk_with_another_role_is_given_this_experiment_s(tmp_path):
    from sigprop.experiments import runner

    optima = {"a": 1e-3}
    run = plan_runs(_experiment(optima), "cpu")[0]
    (tmp_path / run.run_id).mkdir()  # copied in before copies took this experiment's role
    fate = {**dataclasses.asdict(_loss(optima, run)), "tuning": False, "copied_from": "depth/x"}
    (tmp_path / run.run_id / runner.FATE_FILE).write_text(json.dumps(fate))
    results, stopped = runner.execute([run], tmp_path, 1, "cpu", {"a": 5.0}, 0.1, say=lambda s: None)
    assert not stopped and [r.tuning for r in results] == [True]
    assert json.loads((tmp_path / run.run_id / runner.FATE_FILE).read_text())["tuning"] is True  # the table's too


def test_a_crashed_run_steers_nothing_and_is_tried_again_by_the_next_invocation(tmp_path, monkeypatch):
    """A crash (out of memory, a full disk) is not a result of the model and rate: a failed extension past the top
    edge must not end the search there and settle the model at the old edge rate."""
    from sigprop.experiments import runner

    optima = {"a": 2e-3}  # best at the top edge: the grid extends up to 2e-3
    experiment = _experiment(optima)
    launched: list[str] = []
    crash = {"on": True}

    def started(spec):
        launched.append(spec.run_id)
        return 0

    def judge(spec):
        if crash["on"] and spec.lr > 1.5e-3:  # every run past the first grid's top crashes
            return dataclasses.replace(_loss(optima, spec), fate="failed", final_val=None, detail="exit status 1")
        return _loss(optima, spec)

    results, stopped, said = _run_simulated(monkeypatch, tmp_path, experiment, judge, started)
    crashed = [r for r in launched if "lr0.002-" in r]
    assert len(crashed) == 2 and not stopped
    assert not any(r.tuning is False for r in results)  # no third seed at the old edge rate 1.41e-3
    assert all((tmp_path / "out" / r / runner.FAILED_FILE).exists() for r in crashed)
    assert not any((tmp_path / "out" / r / runner.FATE_FILE).exists() for r in crashed)
    assert any("2 run(s) failed" in line and "a wait(s) for them" in line for line in said)

    crash["on"], launched[:] = False, []  # the next invocation: the crashed runs train, the search goes on
    results, _, _ = _run_simulated(monkeypatch, tmp_path, experiment, judge, started)
    assert set(crashed) <= set(launched)
    assert best_learning_rates(results)["a"] == 2e-3
