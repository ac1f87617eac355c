"""The shape ladder's design: equal N·d² at each rung, heads, batches and steps, paired seeds, the tuning on two
seeds, the √2 lattice, evaluation data independent of the seed, runs on other data refused from the pool, the GPU
plan, and the whole experiment end to end at a tiny size."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import pytest
import torch

from sigprop.experiments import catalog, runner
from sigprop.experiments.ladder import Role, heads_for, ladder_model, rung_model_names
from sigprop.experiments.ladder_report import evaluate_ladder, judge, ladder_markdown
from sigprop.experiments.ladder_stats import IntervalKind, fit_trend
from sigprop.experiments.run import _finished_runs, run_experiment
from sigprop.experiments.runner import RunResult, corpus_mismatch
from sigprop.experiments.spec import edge_rates, non_embedding_parameters, plan_runs
from sigprop.experiments.summary import best_learning_rates
from sigprop.model.config import config_from_dict
from sigprop.train.config import train_config_from_dict
from sigprop.train.data import TextData

LADDER = catalog.get_experiment("shape-ladder")
SCALE = LADDER.scale("cpu")


def _by_rung():
    rungs: dict = {}
    for m in SCALE.models:
        lm = ladder_model(m.name)
        rungs.setdefault(lm.rung, {})[lm.role] = m
    return rungs


def test_every_rung_holds_n_d_squared_and_the_tokens_per_parameter():
    """At each rung the shapes' non-embedding parameters agree within 2% (N·d² held; biases and norms differ), every
    run takes 2,000 steps on the rung's batch, ~20 tokens per parameter, heads of 64 where the width allows and
    never fewer than 32 dimensions; the 32-layer model joins from d = 256."""
    rungs = _by_rung()
    assert sorted(rungs) == [64, 96, 128, 192, 256, 384, 512]
    runs = plan_runs(LADDER, "cpu")
    for d, roles in rungs.items():
        assert (Role.DEEPER in roles) == (d >= 256)
        shapes = {role: (m.model["n_layers"], m.model["d_model"]) for role, m in roles.items()}
        assert shapes[Role.SHALLOW_WIDE] == (2, d) and shapes[Role.DEEP_THIN] == shapes[Role.CONTROL] == (8, d // 2)
        params = {role: non_embedding_parameters(config_from_dict({**SCALE.base_model, **m.model}))
                  for role, m in roles.items()}
        assert max(params.values()) / min(params.values()) < 1.02
        mine = [r for r in runs if ladder_model(r.model_name).rung == d]
        assert {(r.train_config["steps"], r.train_config["batch_size"]) for r in mine} == {
            (2000, roles[Role.SHALLOW_WIDE].train["batch_size"])}
        tokens = 2000 * roles[Role.SHALLOW_WIDE].train["batch_size"] * 128
        assert 19.0 < tokens / params[Role.SHALLOW_WIDE] < 21.0 or d == 64  # d = 64: a batch of 8 is 20 ± 1.3
        for m in roles.values():
            width, heads = m.model["d_model"], m.model["n_heads"]
            assert width % heads == 0 and width // heads >= 32
            assert width % 64 or width // heads == 64
        assert {r.model_config["dropout"] for r in mine} == {0.1}
        assert {r.train_config["eval_batches"] for r in mine} == {64}
        assert {r.train_config["data"] for r in mine} == {"pinned:python-v1"}


def test_heads_are_64_wide_where_the_width_allows():
    assert [heads_for(d) for d in (32, 48, 64, 96, 128, 192, 256, 384, 512)] == [1, 1, 1, 2, 2, 3, 4, 6, 8]


def test_the_first_grids_lie_on_the_sqrt2_lattice_and_two_seeds_tune():
    runs = plan_runs(LADDER, "cpu")
    for m in SCALE.models:
        ks = [math.log(lr / 1e-3) / math.log(math.sqrt(2)) for lr in m.lrs]
        assert all(abs(k - round(k)) < 0.01 for k in ks) and [round(b - a) for a, b in pairwise(ks)] == [1, 1]
        assert sorted((r.lr, r.seed) for r in runs if r.model_name == m.name) == sorted(
            (lr, s) for lr in m.lrs for s in (0, 1))
    third = plan_runs(LADDER, "cpu", best_lr={SCALE.models[0].name: 4e-3})
    assert [(r.seed, r.lr, r.tuning) for r in third] == [(2, 4e-3, False)]


def _result(model, lr, seed, val, tuning=True, fate="trained"):
    return RunResult(f"{model}-{lr}-{seed}", model, seed, lr, tuning, fate, "", val, 1, 1, 1.0, [])


def test_the_best_rate_is_chosen_on_the_mean_of_the_two_seeds():
    """Seed 0 alone would choose 4e-3; the mean of seeds 0 and 1 chooses 2.83e-3; a rate where a seed diverged is
    not eligible."""
    name = SCALE.models[0].name
    results = [_result(name, 2.83e-3, 0, 3.10), _result(name, 2.83e-3, 1, 3.10),
               _result(name, 4e-3, 0, 3.05), _result(name, 4e-3, 1, 3.25),
               _result(name, 5.66e-3, 0, 2.0), _result(name, 5.66e-3, 1, None, fate="diverged")]
    assert best_learning_rates(results) == {name: 2.83e-3}
    assert best_learning_rates(results[2:3]) == {name: 4e-3}


def test_a_grid_grows_on_the_lattice_until_the_best_rate_is_interior():
    name = SCALE.models[0].name  # grid 2.83e-3, 4e-3, 5.66e-3
    top = [_result(name, lr, s, v) for lr, v in ((2.83e-3, 3.3), (4e-3, 3.2), (5.66e-3, 3.1)) for s in (0, 1)]
    assert edge_rates(SCALE, top)[name] == (8e-3,)
    more = top + [_result(name, 8e-3, s, 3.0) for s in (0, 1)]
    assert edge_rates(SCALE, more)[name] == (1.13e-2,)
    interior = more + [_result(name, 1.13e-2, s, 3.4) for s in (0, 1)]
    assert name not in edge_rates(SCALE, interior)
    bottom = [_result(name, lr, s, v) for lr, v in ((2.83e-3, 3.0), (4e-3, 3.2), (5.66e-3, 3.3)) for s in (0, 1)]
    assert edge_rates(SCALE, bottom)[name] == (2e-3,)
    down = bottom + [_result(name, lr, s, 2.9 - i * 0.1) for i, lr in enumerate((2e-3, 1.41e-3)) for s in (0, 1)]
    assert edge_rates(SCALE, down)[name] == (1e-3,)


def test_rungs_select_their_models():
    names = rung_model_names(SCALE.models, (64, 256))
    assert len(names) == 3 + 4 and all(n.startswith(("d=64:", "d=256:")) for n in names)
    with pytest.raises(ValueError, match="no rung 100"):
        rung_model_names(SCALE.models, (100,))
    with pytest.raises(ValueError, match="shape ladder"):
        rung_model_names(catalog.get_experiment("depth").scale("cpu").models, (64,))


def _text_data(corpus, model: dict, seed: int, batch: int) -> TextData:
    mc = config_from_dict(dict(arch="decoder", vocab_size=300, seq_len=16, max_len=16, **model))
    return TextData.from_corpus(mc, train_config_from_dict(dict(data=str(corpus), seed=seed, batch_size=batch)))


def test_both_shapes_of_a_rung_see_the_same_batches_at_a_seed_and_the_evaluation_ignores_the_seed(corpus):
    wide = _text_data(corpus, dict(n_layers=2, d_model=32, n_heads=1, init="xavier"), 1, 8)
    thin = _text_data(corpus, dict(n_layers=8, d_model=16, n_heads=1, init="dslm"), 1, 8)
    for step in (0, 7, 1999):
        a, b = wide.train_batch(step, 8).to_dict(), thin.train_batch(step, 8).to_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    other_seed = _text_data(corpus, dict(n_layers=2, d_model=32, n_heads=1, init="xavier"), 2, 8)
    assert not torch.equal(other_seed.train_batch(0, 8).inputs, wide.train_batch(0, 8).inputs)
    for x, y in zip(wide.val_batches(64, 8), other_seed.val_batches(64, 8), strict=True):
        x, y = x.to_dict(), y.to_dict()
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    assert wide.meta()["train_sha256"] == thin.meta()["train_sha256"]


def _fake_run(folder: Path, run_id: str, model: str, fingerprint: dict | None, lr=1e-3, seed=0, precision="fp32",
              tuning=True):
    (folder / run_id).mkdir(parents=True)
    fate = {"run_id": run_id, "model_name": model, "seed": seed, "lr": lr, "tuning": tuning, "fate": "trained",
            "detail": "", "final_val": 3.0, "steps": 1, "tokens": 1, "wall": 1.0, "curve": [[1, 3.0]]}
    (folder / run_id / "fate.json").write_text(json.dumps(fate))
    data = {"kind": "text", **(fingerprint or {})}
    (folder / run_id / "run.json").write_text(json.dumps({"model_config": {}, "train_config": {}, "data": data,
                                                          "precision": precision}))


class _Launched(Exception):
    """Raised in place of starting a run: which run the runner would have trained."""


def _no_training(monkeypatch) -> None:
    def launch(spec, *args):
        raise _Launched(spec.run_id)

    monkeypatch.setattr(runner, "_launch", launch)


def test_a_run_on_another_corpus_in_the_experiment_s_folder_is_set_aside_and_trained_again(tmp_path, monkeypatch):
    """It must not count as finished (it would steer the best rate and the seeds while left out of the table): it
    moves to a hidden sibling folder, which no table reads, and its run is the next to train."""
    _no_training(monkeypatch)
    spec = plan_runs(LADDER, "smoke")[0]
    ours = {"train_sha256": "a" * 64, "validation_sha256": "b" * 64}
    out = tmp_path / "e"
    _fake_run(out, spec.run_id, spec.model_name, {**ours, "train_sha256": "c" * 64}, spec.lr, spec.seed)
    said: list[str] = []
    with pytest.raises(_Launched, match=spec.run_id):
        runner.execute([spec], out, 1, "cpu", {spec.model_name: 6.0}, 0.05, said.append,
                       placement=runner.Placement(corpus={spec.model_name: (ours, True)}))
    assert not (out / spec.run_id).exists() and (out / f".{spec.run_id}.other-data" / "fate.json").is_file()
    assert any(line.startswith("set aside") and "trained on other data" in line for line in said)
    assert _finished_runs(LADDER, "smoke", None, out) == []  # the hidden folder is not a finished run


def test_a_model_s_runs_are_not_trained_in_another_arithmetic_than_its_finished_ones(tmp_path, monkeypatch):
    """A model whose finished run trained in bf16 (a GPU) gets no fp32 runs from a CPU invocation of the same
    folder, said once; with its finished run in fp32, the CPU trains the next."""
    _no_training(monkeypatch)
    runs = plan_runs(LADDER, "smoke")
    first, second = [r for r in runs if r.model_name == runs[0].model_name][:2]
    for precision in ("bf16", "fp32"):
        out = tmp_path / precision
        _fake_run(out, first.run_id, first.model_name, None, first.lr, first.seed, precision=precision)
        said: list[str] = []
        unigram = {first.model_name: 6.0}
        if precision == "bf16":
            runner.execute([first, second], out, 1, "cpu", unigram, 0.05, said.append)
            assert [line for line in said if line.startswith("not trained here")] == [
                f"not trained here: {first.model_name}'s finished runs trained in bf16, and this device trains fp32; "
                "run its other runs where those ran (--device), or into a new --out"]
        else:
            with pytest.raises(_Launched, match=second.run_id):
                runner.execute([first, second], out, 1, "cpu", unigram, 0.05, said.append)


def test_an_interrupted_copy_is_not_a_finished_run(tmp_path):
    spec = plan_runs(LADDER, "smoke")[0]
    out = tmp_path / "e"
    _fake_run(out, spec.run_id, spec.model_name, None, spec.lr, spec.seed)
    shutil.copytree(out / spec.run_id, out / f".{spec.run_id}.copying")  # left by a copy stopped half-way
    assert [r.run_id for r in _finished_runs(LADDER, "smoke", None, out)] == [spec.run_id]


def test_a_run_on_another_corpus_is_refused_from_the_pool(corpus, tmp_path, monkeypatch):
    """Two finished runs of one spec in the folder's place: the one whose record carries the experiment's
    fingerprint is pooled; one with another fingerprint, or (for a pinned corpus) none, is left out and named."""
    tiny = _tiny_ladder(corpus, monkeypatch)
    runs = plan_runs(tiny, "smoke")
    ours = {"train_sha256": "a" * 64, "validation_sha256": "b" * 64}
    theirs = {"train_sha256": "c" * 64, "validation_sha256": "b" * 64}
    out = tmp_path / "e"
    _fake_run(out, runs[0].run_id, runs[0].model_name, ours, runs[0].lr, runs[0].seed)
    _fake_run(out, runs[1].run_id, runs[1].model_name, theirs, runs[1].lr, runs[1].seed)
    _fake_run(out, runs[2].run_id, runs[2].model_name, None, runs[2].lr, runs[2].seed)
    expected = {m.name: (ours, True) for m in tiny.scale("smoke").models}
    refused: list[str] = []
    pooled = _finished_runs(tiny, "smoke", None, out, expected, refused)
    assert [r.run_id for r in pooled] == [runs[0].run_id]
    assert len(refused) == 2 and "trained on other data" in " ".join(refused) and "no data fingerprint" in " ".join(
        refused)
    assert corpus_mismatch(out / runs[2].run_id, ours, required=False) is None  # an older record elsewhere: pooled
    assert len(_finished_runs(tiny, "smoke", None, out)) == 3  # no fingerprint to hold them to: all pooled


def _tiny_ladder(corpus, monkeypatch):
    """The smoke ladder on the tests' small corpus (vocabulary 300), registered under its own name."""
    smoke = LADDER.scale("smoke")
    models = tuple(replace(m, model={**m.model}) for m in smoke.models)
    scale = replace(smoke, models=models, base_model={**smoke.base_model, "vocab_size": 300},
                    train={**smoke.train, "data": str(corpus)})
    tiny = replace(LADDER, name="tiny-ladder", scales={"smoke": scale}, stall_margin=-10.0)  # every run "trains"
    monkeypatch.setitem(catalog.EXPERIMENTS, "tiny-ladder", tiny)
    return tiny


@pytest.mark.long
def test_the_ladder_runs_end_to_end_at_a_tiny_size(corpus, tmp_path, monkeypatch):
    """One rung of d = 16, shallow-wide and deep-thin (``--rungs 16`` with ``--model``): two tuning seeds at one
    rate, a third seed, every run's record holding its data's fingerprint, the paired gap in ladder.md; a second
    invocation trains nothing."""
    _tiny_ladder(corpus, monkeypatch)
    said: list[str] = []
    result = run_experiment("tiny-ladder", scale="smoke", out=tmp_path / "e", workers=2, say=said.append,
                            rungs=(16,), models=("*2x16 xavier*", "*8x8 dslm*"))
    assert not result.stopped
    assert {p.name for p in result.files} >= {"table.md", "ladder.json", "ladder.md", "ladder.png"}
    assert {(r.seed, r.tuning) for r in result.runs} == {(0, True), (1, True), (2, False)}
    assert len(result.runs) == 2 * 3
    expected = TextData.from_corpus(config_from_dict(dict(arch="decoder", vocab_size=300, seq_len=16, max_len=16)),
                                    train_config_from_dict(dict(data=str(corpus)))).meta()["train_sha256"]
    for run in result.runs:
        assert json.loads((tmp_path / "e" / run.run_id / "run.json").read_text())["data"]["train_sha256"] == expected
    table = json.loads((tmp_path / "e" / "ladder.json").read_text())
    (rung,) = table["rungs"]
    assert rung["d"] == 16 and rung["deep-thin"]["dof"] == 2 and rung.get("deeper") is None
    assert len(rung["deep-thin"]["differences"]) == 3
    assert "Verdict" in (tmp_path / "e" / "ladder.md").read_text()
    again: list[str] = []
    run_experiment("tiny-ladder", scale="smoke", out=tmp_path / "e", workers=2, say=again.append, rungs=(16,),
                   models=("*2x16 xavier*", "*8x8 dslm*"))
    assert not any(line.startswith("start") for line in again)


def _rung_record(d, low, high, params):
    decides = "deep side wins" if high < 0 else "shallow-wide wins" if low > 0 else "undecided"
    return {"d": d, "parameters": params, "deep-thin": {"se": 0.01, "decides": decides, "mean": (low + high) / 2}}


def test_the_verdict_follows_the_preregistered_rules():
    up = [_rung_record(64, 0.1, 0.3, 10**5), _rung_record(128, 0.05, 0.2, 4 * 10**5)]
    assert judge(up, None).startswith("Not reproduced up to 400,000")
    won = [_rung_record(64, 0.1, 0.3, 10**5), _rung_record(128, -0.2, -0.05, 4 * 10**5),
           _rung_record(256, -0.3, -0.1, 1.6 * 10**6)]
    assert judge(won, None).startswith("Reproduced at ≥ 400,000")
    mixed = [_rung_record(64, -0.3, -0.1, 10**5), _rung_record(128, -0.1, 0.1, 4 * 10**5)]
    assert judge(mixed, None).startswith("Mixed")
    # a win, an undecided rung, then wins at every larger rung: reproduced from the first of those
    late = [_rung_record(64, -0.3, -0.1, 10**5), _rung_record(128, -0.1, 0.1, 4 * 10**5),
            _rung_record(192, -0.3, -0.1, 9 * 10**5), _rung_record(256, -0.3, -0.1, 1.6 * 10**6)]
    assert judge(late, None).startswith("Reproduced at ≥ 900,000 non-embedding parameters (d = 192)")


def test_the_verdict_claims_no_reproduction_while_a_larger_rung_that_ran_is_not_read():
    won = [_rung_record(64, -0.3, -0.1, 10**5)]
    stuck = _rung_record(96, 0.1, 0.3, 2 * 10**5)  # shallow-wide ahead, but a deep-thin seed diverged at its best
    stuck["deep-thin"] |= {"final": False, "unread": "8x48 dslm: a seed at the best rate diverged or stalled"}
    text = judge([*won, stuck], None)
    assert not text.startswith("Reproduced") and "not yet 'reproduced'" in text
    assert "d = 96 ran but is not read (8x48 dslm: a seed at the best rate diverged or stalled)" in text
    assert judge(won, None).startswith("Reproduced at ≥ 100,000")
    single = _rung_record(96, 0.1, 0.3, 2 * 10**5)
    single["deep-thin"]["se"] = None  # settled, but one paired seed: no interval
    assert "d = 96 ran but is not read (one paired seed)" in judge([*won, single], None)


def _trend_rungs(deltas, se=0.02):
    """Rungs at P = 10⁵, 10^5.5, 10⁶ with these deep-thin gaps, each with standard error ``se``."""
    return [{"d": 64 * (i + 1), "parameters": 10 ** (5 + 0.5 * i),
             "deep-thin": {"se": se, "mean": delta, "decides": "undecided", "final": True}}
            for i, delta in enumerate(deltas)]


def _spread(means, half=0.03):
    """Three paired differences, ``mean`` and ``mean`` ± ``half``, at each rung: tight rungs."""
    return [[m - half, m, m + half] for m in means]


def test_the_verdict_places_the_trend_s_zero_on_the_side_where_it_lies():
    """Fieller's interval of the zero is bounded in each case; the text says on which side of the rungs the zero
    lies, and a rising Δ is never read as a crossover of the paper's kind."""
    falling_above = _trend_rungs((0.6, 0.4, 0.2))  # zero at log₁₀ P = 6.5
    trend = fit_trend([5.0, 5.5, 6.0], _spread((0.6, 0.4, 0.2)))
    text = judge(falling_above, trend)
    assert "points to a crossover near P* = 3.16e+06" in text and "beyond the largest rung fitted" in text
    rising_above = _trend_rungs((-0.6, -0.4, -0.2))
    trend = fit_trend([5.0, 5.5, 6.0], _spread((-0.6, -0.4, -0.2)))
    text = judge(rising_above, trend)
    assert "points away from a crossover" in text and "beyond the largest rung fitted" in text
    rising_below = _trend_rungs((0.2, 0.4, 0.6))  # zero at log₁₀ P = 4.5
    trend = fit_trend([5.0, 5.5, 6.0], _spread((0.2, 0.4, 0.6)))
    assert "below the smallest rung fitted" in judge(rising_below, trend)


def test_a_two_half_line_interval_is_written_as_two_half_lines():
    trend = {"intercept": 1.0, "slope_per_decade": -0.2, "rungs": 3, "dof": 1, "chi2": 0.5, "inflation": 1.0,
             "crossover_log10_p": 5.0, "crossover_p": 1e5, "interval": IntervalKind.TWO_HALF_LINES.value,
             "interval_log10_p": [4.01, 5.91]}
    text = ladder_markdown({"rules": "r", "verdict": "v", "rungs": [], "trend": trend, "control_trend": None},
                           "t", "i")
    assert "log₁₀ P ∈ (−∞, 4.01] ∪ [5.91, ∞) (two half-lines)" in text
    far = {**trend, "crossover_log10_p": 400.0, "crossover_p": None}
    assert "P* = 10^400" in ladder_markdown({"rules": "r", "verdict": "v", "rungs": [], "trend": far,
                                             "control_trend": None}, "t", "i")


def _fabricated_table(tmp_path, settled_rungs=None) -> dict:
    """The ladder table of fabricated results on three rungs (gaps 0.3, 0.2, 0.1 plus 0.01 per seed), the rows of
    the rungs in ``settled_rungs`` settled (default: every rung)."""
    summary = {"rows": []}
    results = []
    for d, gap in ((64, 0.3), (96, 0.2), (128, 0.1)):
        for m in _by_rung()[d].values():
            role = ladder_model(m.name).role
            summary["rows"].append({"model": m.name, "best_lr": 4e-3, "non_embedding_parameters": 100 * d * d,
                                    "tokens_per_run": 2000 * d * d, "tokens_per_parameter": 20.0,
                                    "settled": settled_rungs is None or d in settled_rungs})
            for seed in (0, 1, 2):
                base = 3.0 + 0.01 * seed * seed
                val = base + (gap + 0.01 * seed if role is Role.DEEP_THIN else 0.05 if role is Role.CONTROL else 0.0)
                results.append(_result(m.name, 4e-3, seed, val, tuning=seed < 2))
                results.append(_result(m.name, 8e-3, seed, val - 1.0))  # not the best rate: not paired
    return evaluate_ladder(summary, results, tmp_path, tmp_path)


def test_the_ladder_table_pairs_seeds_at_each_model_s_best_rate(tmp_path):
    """Fabricated results on three rungs: the table's gaps are the per-seed differences at each model's best rate
    and the trend is fitted once three rungs have intervals."""
    table = _fabricated_table(tmp_path)
    gaps = [r["deep-thin"]["mean"] for r in table["rungs"]]
    assert gaps == [pytest.approx(0.31), pytest.approx(0.21), pytest.approx(0.11)]
    assert [r["control"]["mean"] for r in table["rungs"]] == [pytest.approx(0.05)] * 3
    assert table["trend"]["rungs"] == 3 and table["trend"]["slope_per_decade"] < 0


def test_a_rung_whose_tuning_is_not_finished_is_provisional(tmp_path):
    """Gaps of models whose rate search or seeds are unfinished are shown but neither judged nor fitted: with only
    the first rung settled there is no trend, and the verdict reads that rung alone."""
    table = _fabricated_table(tmp_path, settled_rungs={64})
    finals = [r["deep-thin"]["final"] for r in table["rungs"]]
    assert finals == [True, False, False] and table["trend"] is None
    assert table["verdict"].startswith("Not reproduced up to 409,600")
    markdown = ladder_markdown(table, "t", "i")
    assert markdown.count("provisional: tuning not finished") >= 2
    nothing = _fabricated_table(tmp_path, settled_rungs=set())
    assert nothing["verdict"].startswith("No rung is finished yet")


def test_a_model_is_settled_once_its_grid_is_interior_and_its_seeds_trained():
    from types import SimpleNamespace as Run

    from sigprop.experiments.summary import settled

    scale = Run(tuning_seeds=2, grid_extensions=3)
    spec = Run(lrs=(1.0, 2.0, 4.0))

    def runs(lrs, seeds=2, extra=0, best=2.0):
        tuned = [Run(lr=lr, tuning=True, fate="trained") for lr in lrs for _ in range(seeds)]
        return tuned + [Run(lr=best, tuning=False, fate="trained")] * extra

    assert settled(spec, runs((1.0, 2.0, 4.0), extra=1), 2.0, scale, 3)
    assert not settled(spec, runs((1.0, 2.0), extra=1), 2.0, scale, 3)  # the first grid not all tried
    assert not settled(spec, runs((1.0, 2.0, 4.0), seeds=1, extra=2), 2.0, scale, 3)  # a rate on one tuning seed
    assert not settled(spec, runs((1.0, 2.0, 4.0), extra=1, best=4.0), 4.0, scale, 3)  # best at an edge
    assert settled(spec, runs((1.0, 2.0, 4.0), extra=1, best=4.0), 4.0, Run(tuning_seeds=2, grid_extensions=0), 3)
    assert not settled(spec, runs((1.0, 2.0, 4.0)), 2.0, scale, 3)  # the third seed not yet trained
    assert not settled(spec, [], None, scale, 3)


def test_a_model_that_trained_at_no_rate_is_settled_once_the_lowered_rates_are_spent():
    from types import SimpleNamespace as Run

    from sigprop.experiments.summary import settled

    spec = Run(lrs=(1.0, 2.0, 4.0))
    lowers = Run(tuning_seeds=2, grid_extensions=2, lower_when_none_trains=True)

    def stalled(lrs, seeds=2):
        return [Run(lr=lr, tuning=True, fate="stalled") for lr in lrs for _ in range(seeds)]

    assert not settled(spec, stalled((1.0, 2.0, 4.0)), None, lowers, 2)  # the lower rates not yet tried
    assert not settled(spec, stalled((0.5, 1.0, 2.0, 4.0)), None, lowers, 2)  # one of two
    assert settled(spec, stalled((0.25, 0.5, 1.0, 2.0, 4.0)), None, lowers, 2)  # spent: trained at no rate tried
    assert not settled(spec, stalled((0.25, 0.5, 1.0, 2.0, 4.0), seeds=1), None, lowers, 2)  # one tuning seed
    assert not settled(spec, stalled((0.25, 0.5, 1.0, 2.0)), None, lowers, 2)  # the first grid not all tried
    keeps = Run(tuning_seeds=2, grid_extensions=2, lower_when_none_trains=False)
    assert not settled(spec, stalled((0.25, 0.5, 1.0, 2.0, 4.0)), None, keeps, 2)  # never, where grids stay


def _gpu_script():
    path = Path(__file__).resolve().parents[2] / "bench" / "gpu_experiments.py"
    spec = importlib.util.spec_from_file_location("gpu_experiments", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_plan_runs_the_rungs_that_fit_and_counts_finished_runs():
    gpu = _gpu_script()
    rungs = (192, 256, 384, 512)
    costs = {d: gpu.rung_cost(d, {})[1] for d in rungs}
    assert costs[192] < costs[256] < costs[384] < costs[512]

    def planned(budget, finished=None, order="smallest"):
        return [wave[0][3] for _, wave in gpu.ladder_waves(budget, rungs, finished or {}, 4, order)]

    assert planned(1.0) == [192]  # the first rung always runs, so every sitting makes progress
    assert planned(costs[192] + costs[256] + 1) == [192, 256]
    assert planned(sum(costs.values()) + 1) == [192, 256, 384, 512]
    assert planned(1.0, order="largest") == [512]
    assert planned(costs[512] + costs[384] + 1, order="largest") == [512, 384]
    done = {}
    for run in plan_runs(LADDER, "cpu"):
        if ladder_model(run.model_name).rung == 192:
            done[run.run_id] = {"model_name": run.model_name, "tuning": True}
    for m in _by_rung()[192].values():
        done[f"{m.name}-third"] = {"model_name": m.name, "tuning": False}
    assert gpu.rung_cost(192, done) == (0, 0.0)
    assert planned(1.0, done) == [256]
    with pytest.raises(ValueError, match="--order"):
        gpu.ladder_waves(10, rungs, {}, 4, "middle")


@pytest.mark.parametrize(("args", "needle"), [
    (["experiment", "shape-ladder", "--rungs", "64,x"], "--rungs must be widths"),
    (["experiment", "shape-ladder", "--rungs", "100"], "no rung 100"),
    (["experiment", "depth", "--rungs", "64"], "shape ladder"),
    (["experiment", "shape-ladder", "--rungs", "64", "--model", "*32x*"], "matches no model at rungs 64"),
])
def test_bad_rungs_are_refused_before_any_run(args, needle, tmp_path):
    from tests.cli.test_front_door import refused

    refused([*args, "--out", str(tmp_path / "e")], needle)
    assert not (tmp_path / "e").exists()


def test_kept_records_leave_out_hidden_folders_and_write_each_fate_last(tmp_path):
    """``bench/experiment_records.py`` keeps a run's own folder only (not an interrupted copy or a run set aside), and
    writes its fate, the mark of a finished record, after the run record that holds its fingerprint."""
    import bench.experiment_records as records

    spec = plan_runs(LADDER, "smoke")[0]
    out = tmp_path / "e"
    _fake_run(out, spec.run_id, spec.model_name, None, spec.lr, spec.seed)
    shutil.copytree(out / spec.run_id, out / f".{spec.run_id}.copying")
    assert records.keep_records(out, tmp_path / "kept") == [spec.run_id]
    assert [p.name for p in (tmp_path / "kept").iterdir()] == [spec.run_id]
    assert records.LIGHT_FILES.index("fate.json") == len(records.LIGHT_FILES) - 1
