"""What deciding model by model (``sigprop/experiments/schedule.py``) saves against deciding stage by stage, measured
on a simulation of an experiment's runs on a number of workers.

    python bench/schedule_makespan.py [--experiment shape-ladder] [--rungs 64,96,128] [--workers 2]

Each run takes the time ``sigprop experiment --list`` estimates for it (``cpu_seconds_per_token`` × its tokens), and
ends at a loss whose best rate is placed, per scenario, at the middle of each model's first grid (no extension), one
lattice step above its top (one extension up for every model), or varied per model (models alternately centred,
above their grid by one step, below it by one step). Both rules train the same runs (``tests/experiments/
test_schedule.py``); what differs is when each starts. Stage by stage: every tuning run, then each round of grid
extensions, then every model's other seeds, each stage waiting for the last run of the one before. Model by model:
the schedule, asked again whenever a run ends. A worker takes the next run in the rule's order as soon as it is
free. Printed per scenario: the makespan of each rule (hours), their ratio, the workers' idle time, and when each
group (a ladder's rung) has all its runs finished.
"""

from __future__ import annotations

import argparse
import heapq
import math
import sys
from collections.abc import Callable

from sigprop.experiments.catalog import get_experiment
from sigprop.experiments.run import cpu_seconds_per_token, selected_models
from sigprop.experiments.runner import RunResult
from sigprop.experiments.schedule import Schedule
from sigprop.experiments.spec import edge_rates, plan_runs
from sigprop.experiments.summary import best_learning_rates
from sigprop.model.config import config_from_dict


def run_seconds(experiment, run) -> float:
    """The estimated wall time of ``run`` (one single-thread CPU run beside another)."""
    config = config_from_dict(run.model_config)
    tokens = run.train_config["steps"] * run.train_config["batch_size"] * config.seq_len
    return tokens * cpu_seconds_per_token(config)


def simulate(order: Callable[[dict], list], cost: Callable, loss: Callable, workers: int,
             barrier: bool) -> tuple[float, float, dict]:
    """(makespan, idle worker-seconds, run id → (end time, model name)) of running what ``order(finished)`` asks for on
    ``workers``; with ``barrier``, ``order`` is asked again only when nothing is running (a stage's end)."""
    clock, idle, running, finished, ends = 0.0, 0.0, [], {}, {}
    started: set[str] = set()
    while True:
        if not (barrier and running):
            todo = [r for r in order(finished) if r.run_id not in started]
        while todo and len(running) < workers:
            run = todo.pop(0)
            started.add(run.run_id)
            heapq.heappush(running, (clock + cost(run), run.run_id, run))
        if not running:
            return clock, idle, ends
        end, _, run = heapq.heappop(running)
        idle += (workers - len(running) - 1) * (end - clock)
        clock = end
        finished[run.run_id] = loss(run)
        ends[run.run_id] = (end, run.model_name)


def by_stages(experiment, scale_name: str, loss: Callable) -> Callable[[dict], list]:
    """The stage-by-stage rule as an order asked at each stage's end."""
    scale = experiment.scale(scale_name)
    tuning = plan_runs(experiment, scale_name)

    def order(finished: dict) -> list:
        done = [finished[r] for r in finished]
        todo = [r for r in tuning if r.run_id not in finished]
        if todo:
            return todo
        extra = edge_rates(scale, [r for r in done if r.tuning])
        if extra:
            return [r for r in plan_runs(experiment, scale_name, extra_lrs=extra) if r.run_id not in finished]
        return [r for r in plan_runs(experiment, scale_name, best_lr=best_learning_rates(done))
                if r.run_id not in finished]

    return order


def scenario_loss(optimum: dict) -> Callable:
    def loss(run) -> RunResult:
        x = math.log(run.lr / optimum[run.model_name])
        return RunResult(run.run_id, run.model_name, run.seed, run.lr, run.tuning, "trained", "",
                         3.0 + x * x + 0.01 * run.seed, 1, 1, 1.0, [])

    return loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="shape-ladder")
    parser.add_argument("--rungs", default="64,96,128", help="shape-ladder: the rungs")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    try:
        experiment = get_experiment(args.experiment)
        rungs = ()
        if experiment.name == "shape-ladder":
            try:
                rungs = tuple(int(r) for r in args.rungs.split(","))
            except ValueError:
                raise ValueError(f"--rungs must be widths d such as 64,96,128 (got {args.rungs!r})") from None
        experiment = selected_models(experiment, "cpu", rungs=rungs)
        if args.workers < 1:
            raise ValueError(f"--workers must be at least 1 (got {args.workers})")
    except ValueError as exc:
        print(f"schedule_makespan: {exc}", file=sys.stderr)
        sys.exit(2)
    models = experiment.scale("cpu").models
    step = math.sqrt(2.0)
    scenarios = {
        "optimum at each grid's middle": {m.name: sorted(m.lrs)[1] for m in models},
        "optimum one step above each grid": {m.name: max(m.lrs) * step for m in models},
        "mixed: middle, above, below in turn": {m.name: (sorted(m.lrs)[1], max(m.lrs) * step,
                                                         min(m.lrs) / step)[i % 3] for i, m in enumerate(models)},
    }
    cost = lambda run: run_seconds(experiment, run)  # noqa: E731
    group = {m.name: m.group for m in models}
    print(f"{args.experiment}, {len(models)} models, {args.workers} workers; run times from --list's estimate")
    for title, optimum in scenarios.items():
        loss = scenario_loss(optimum)
        old = simulate(by_stages(experiment, "cpu", loss), cost, loss, args.workers, barrier=True)
        new = simulate(Schedule(experiment, "cpu", None, say=lambda s: None), cost, loss, args.workers,
                       barrier=False)
        assert set(old[2]) == set(new[2]), "the two rules trained different runs"
        print(f"\n{title}: {len(new[2])} runs")
        print(f"  makespan  stage by stage {old[0] / 3600:7.2f} h   model by model {new[0] / 3600:7.2f} h   "
              f"ratio {new[0] / old[0]:.3f}")
        print(f"  idle      stage by stage {old[1] / 3600:7.2f} h   model by model {new[1] / 3600:7.2f} h "
              "(worker-hours)")
        for g in sorted(set(group.values())):
            last = [max(end for end, model in rule[2].values() if group[model] == g) for rule in (old, new)]
            print(f"  group {g}: all its runs finished at {last[0] / 3600:6.2f} h stage by stage, "
                  f"{last[1] / 3600:6.2f} h model by model")


if __name__ == "__main__":
    main()
