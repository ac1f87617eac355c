"""Which runs an experiment needs, given those that have finished: each model's tuning grid, its grid extensions and the
other seeds at its best rate, decided model by model as soon as that model's own runs allow.

A model's runs come in stages. Its tuning runs (every rate of its grid, each tuning seed) come first. When they have
all finished and its best rate (the lowest mean of the tuning seeds' final validation losses,
:func:`~sigprop.experiments.summary.best_learning_rates`) sits at an edge of the rates tried, the next rate beyond
that edge trains (:func:`~sigprop.experiments.spec.edge_rates`), and so on until it is interior or the extensions are
spent; its rate search is then over, and its other seeds train at its best rate. (The table calls a model *settled*,
:func:`~sigprop.experiments.summary.settled`, only where that rate is interior and those seeds trained.) Every
decision reads the model's own runs only, which is what the rules always read; deciding model by model rather than
stage by stage over the whole experiment changes none of the runs, only when they start: a model settles as soon as
its own runs have finished, so a stopped experiment holds as many settled models as it can. The total time is not
shorter: a ladder's largest runs are left to the end (the two rules simulated on estimated run times,
``bench/schedule_makespan.py``; its figures: docs/results/experiments/shape-ladder.md, "Running it").

The order in which runs start: by the model's group (:attr:`~sigprop.experiments.spec.ModelSpec.group`; a shape
ladder's rung, so that the cheapest rungs settle first), then a model's grid extensions and other seeds before the
first-grid runs still to start (those wait, not the models whose first grid has finished), then the experiment's own
order (:func:`~sigprop.experiments.spec.plan_runs`: every model's middle rate first).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .spec import Experiment, RunSpec, edge_rates, plan_runs

__all__ = ["Schedule"]


class Schedule:
    """The runs an experiment needs so far, given its finished runs; called again whenever a run finishes.

    Args:
        experiment: the experiment (its models perhaps narrowed by ``--model`` or ``--rungs``).
        scale_name: the scale it runs at.
        seeds: seeds per model at its best rate (None: the scale's).
        say: where to report a grid extension.

    Example:
        >>> from sigprop.experiments.catalog import get_experiment
        >>> schedule = Schedule(get_experiment("shape-ladder"), "smoke", None)
        >>> [run.tuning for run in schedule({})]  # nothing finished: the tuning runs alone
        [True, True, True, True, True, True, True, True]
    """

    def __init__(self, experiment: Experiment, scale_name: str, seeds: int | None,
                 say: Callable[[str], None] = print) -> None:
        self.experiment, self.scale_name, self.seeds, self.say = experiment, scale_name, seeds, say
        self.scale = experiment.scale(scale_name)
        self.tuning = plan_runs(experiment, scale_name, seeds)
        self.extensions: list[RunSpec] = []  # every grid extension proposed so far, in the order proposed
        self._group = {m.name: m.group for m in self.scale.models}

    def __call__(self, finished: dict) -> list[RunSpec]:
        """Every run needed so far, in the order to start them.

        Args:
            finished: run id → the finished run's result (:class:`~sigprop.experiments.runner.RunResult`) of any run
                this schedule returned before, and perhaps others (ignored).

        Returns:
            The tuning runs, the grid extensions proposed so far (a new one for each model whose tuning runs have
            all finished with the best rate at an edge) and the other seeds of each settled model, finished or not.
        """
        complete = self._tuned(finished)
        extend = edge_rates(self.scale, [finished[r.run_id] for r in self._tuning_runs() if r.model_name in complete])
        new: list[RunSpec] = []
        if extend:
            known = {r.run_id for r in self._tuning_runs()}
            new = [r for r in plan_runs(self.experiment, self.scale_name, self.seeds, extra_lrs=extend)
                   if r.run_id not in known]
            if new:
                self.say("best rate at the edge of the grid tried: " + ", ".join(
                    f"{m} tries {lrs[0]:g}" for m, lrs in extend.items() if any(r.model_name == m for r in new)))
                self.extensions += new
        settled = complete - {r.model_name for r in new}  # (a proposal of runs already tried settles its model)
        from .summary import best_learning_rates

        best = best_learning_rates([finished[r.run_id] for r in self._tuning_runs() if r.model_name in settled])
        rest = plan_runs(self.experiment, self.scale_name, self.seeds, best_lr=best) if best else []
        runs = self.tuning + self.extensions + rest
        first_grid = {r.run_id for r in self.tuning}
        order = {r.run_id: i for i, r in enumerate(runs)}
        return sorted(runs, key=lambda r: (self._group.get(r.model_name, 0), r.run_id in first_grid,
                                           order[r.run_id]))

    def _tuning_runs(self) -> Iterable[RunSpec]:
        return self.tuning + self.extensions

    def _tuned(self, finished: dict) -> set[str]:
        """The models all of whose tuning runs proposed so far have finished."""
        waiting = {r.model_name for r in self._tuning_runs() if r.run_id not in finished}
        return {m.name for m in self.scale.models} - waiting
