"""The front door: every bad input found by trying sigprop as a new user would gets one line on standard error and
exit status 2, before any expensive work; nothing is accepted silently; nothing hangs. One test per case, named
after what was tried (grouped as tracebacks, silently wrong, hangs, confusing)."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
import torch

from sigprop import GradMoments, Moments, TransformerConfig, predict
from sigprop.model.batches import token_batch
from tests.helpers import run_cli

SMALL = ["--set", "n_layers=3", "--set", "d_model=32", "--set", "n_heads=2", "--set", "vocab_size=300",
         "--set", "seq_len=16", "--set", "max_len=16"]
SMALL_CONFIG = dict(n_layers=3, d_model=32, n_heads=2, vocab_size=300, seq_len=16, max_len=16)


def refused(args, *needles):
    """Run the command; it must fail with status 2 and one ``error:`` line on stderr containing every needle, print
    nothing on stdout, and show no traceback."""
    result = run_cli(args)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("[")]  # progress lines aside
    assert result.exit_code == 2, (args, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), (args, result.stderr)
    assert "Traceback" not in result.output and not result.stdout.strip(), (args, result.output)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# -- tracebacks --------------------------------------------------------------------------------------------------
def test_config_or_measured_pointing_at_a_folder(tmp_path):
    refused(["predict", "--config", str(tmp_path)], "--config", "folder")
    refused(["compare", "--measured", str(tmp_path)], "--measured", "folder")


def test_predict_data_missing():
    refused(["predict", "--data", "/missing/corpus"], "--data", "not found")


@pytest.mark.parametrize("args,needle", [
    (["predict", "--set", "qk_gain=1e308"], "qk_gain"),
    (["apjn", "--sigma-attn", "1e308"], "sigma_ov"),
    (["apjn", "--alpha", "1e308", "--norm", "derf"], "alpha"),
])
def test_float_overflow(args, needle):
    refused(args, needle)


@pytest.mark.parametrize("command", ["predict", "measure"])
def test_lam_and_beta_both_zero(command):
    refused([command, *SMALL, "--set", "lam=0", "--set", "beta=0"], "lam and beta")


def test_dropout_next_to_one():
    refused(["predict", *SMALL, "--set", "dropout=0.999999"], "dropout")


def test_a_width_too_large_for_memory():
    start = time.perf_counter()
    refused(["predict", "--set", "d_model=100000", "--set", "n_heads=1"], "memory")
    assert time.perf_counter() - start < 10.0


def test_apjn_tiny_runs_to_its_json(tmp_path):
    """Once a LinAlgError after the table and no JSON: a slope that cannot be fitted is now reported as none."""
    out = tmp_path / "a.json"
    result = run_cli(["apjn", "--blocks", "2", "--width", "16", "--tokens", "4", "--seeds", "1", "--probes", "2",
                      "--heads", "2", "--json", out])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["kind"] == "apjn"


def test_apjn_one_block():
    refused(["apjn", "--blocks", "1"], "blocks")


def test_measured_file_whose_seeds_are_an_int(tmp_path):
    path = tmp_path / "m.json"
    measured = run_cli(["measure", *SMALL, "--synthetic", "--seeds", "2", "--batch-size", "2", "--json", path])
    assert measured.exit_code == 0, measured.output
    data = json.loads(path.read_text())
    data["meta"]["seeds"] = 2
    path.write_text(json.dumps(data))
    refused(["compare", "--measured", path], "seeds")


@pytest.mark.parametrize("flag", ["--json", "--plot", "--markdown"])
def test_outputs_that_cannot_be_written(tmp_path, flag):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    name = "out.png" if flag == "--plot" else "out.txt"
    command = ["verify", "dropout", "--quick", "--configs", "2"] if flag == "--markdown" else ["predict", *SMALL]
    refused([*command, flag, a_file / name], "not a folder")  # under a file
    refused([*command, flag, tmp_path], "folder")  # onto a folder
    refused([*command, flag, "/proc/self/" + name], "cannot write")  # a folder no one can write in
    refused([*command, flag, ""])


def test_a_read_only_folder(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; /proc stands in for one above")
    tmp_path.chmod(0o555)
    try:
        refused(["predict", *SMALL, "--json", tmp_path / "p.json"], "cannot write")
    finally:
        tmp_path.chmod(0o755)


def test_plot_that_is_not_a_png(tmp_path):
    refused(["predict", *SMALL, "--plot", tmp_path / "p.txt"], ".png")


# -- silently wrong ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args,needle", [
    (["measure", "--seeds", "0"], "--seeds"), (["compare", "--seeds", "0"], "--seeds"),
    (["measure", "--batch-size", "0"], "--batch-size"), (["predict", "--batch-size", "0"], "--batch-size"),
    (["predict", "--batch-size", "-1"], "--batch-size"), (["verify", "--configs", "0"], "--configs"),
    (["measure", "--first-seed", "-1"], "--first-seed"), (["predict", "--attention-heads", "1"], "heads"),
])
def test_zero_and_negative_counts_are_refused_not_defaulted(args, needle):
    refused(args, needle)


def test_non_finite_images(tmp_path):
    images = np.ones((4, 8, 8), dtype=np.float32)
    images[1, 2, 3] = np.nan
    np.save(tmp_path / "nan.npy", images)
    images[1, 2, 3] = np.inf
    np.save(tmp_path / "inf.npy", images)
    vit = ["--set", "input=patches", "--set", "image_size=8", "--set", "patch_size=4", "--set", "seq_len=4",
           "--set", "n_layers=2", "--set", "d_model=16", "--set", "n_heads=2", "--batch-size", "2"]
    for name in ("nan.npy", "inf.npy"):
        refused(["measure", *vit, "--data", tmp_path / name], "NaN or infinite")
    with pytest.raises(ValueError, match="finite"):
        predict(TransformerConfig(input="patches", image_size=8, patch_size=4, seq_len=4, n_layers=2, d_model=16,
                                  n_heads=2), images=torch.full((2, 1, 8, 8), float("nan")))


@pytest.mark.parametrize("edit,needle", [
    (lambda d: d["per_site"][3].update(fwd_var=-1.0), "negative"),
    (lambda d: d["per_site"][3].update(fwd_corr=5.0), "not a correlation"),
    (lambda d: d.update(per_site=[r for r in d["per_site"] if r["layer"] != 1]), "no row for layer"),
    (lambda d: d["config"].update(d_model=64), "config_sha256"),
])
def test_a_tampered_measurement_is_refused(tmp_path, edit, needle):
    path = tmp_path / "m.json"
    measured = run_cli(["measure", *SMALL, "--synthetic", "--seeds", "2", "--batch-size", "2", "--json", path])
    assert measured.exit_code == 0, measured.output
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    refused(["compare", "--measured", path], needle)


def test_plot_onto_a_folder_is_refused_not_renamed(tmp_path):
    refused(["predict", *SMALL, "--plot", tmp_path], "folder")
    assert not (tmp_path.parent / (tmp_path.name + ".png")).exists()


def test_synthetic_with_data(tmp_path):
    refused(["measure", *SMALL, "--synthetic", "--data", tmp_path], "--synthetic")


def test_an_empty_device():
    refused(["measure", *SMALL, "--device", ""], "empty")


def test_strings_are_not_booleans():
    for field in ("tie_head", "final_norm", "learnable_beta", "shaped_normalize"):
        with pytest.raises(ValueError, match=field):
            TransformerConfig(**{field: "no"})


def test_predict_checks_its_token_ids_and_labels_as_measure_does():
    config = TransformerConfig(**SMALL_CONFIG)
    batch = token_batch(config, batch_size=2, synthetic=True)
    ids, labels = batch.inputs, batch.labels
    for bad, match in ((ids.float(), "integer"), (-ids - 1, r"\[0, 300\)"), (ids + 300, r"\[0, 300\)")):
        with pytest.raises(ValueError, match=match):
            predict(config, token_ids=bad)
    with pytest.raises(ValueError, match="shape"):
        predict(config, token_ids=ids, labels=labels[:, :-1])
    with pytest.raises(ValueError, match="image patches|input='tokens'"):
        predict(config, images=torch.zeros(2, 1, 32, 32))


def test_moments_refuse_booleans_and_strings():
    for bad in (True, "1.0"):
        with pytest.raises(ValueError, match="real number"):
            Moments(var=bad)
        with pytest.raises(ValueError, match="real number"):
            GradMoments(var=bad)


# -- hangs ---------------------------------------------------------------------------------------------------------
def test_a_billion_layers_is_refused_at_once():
    start = time.perf_counter()
    refused(["predict", "--set", "n_layers=1000000000"], "memory")
    refused(["measure", "--set", "n_layers=1000000000"], "memory")
    assert time.perf_counter() - start < 10.0


def test_demo_with_no_seeds_does_no_work_and_leaves_no_folder(tmp_path):
    start = time.perf_counter()
    refused(["demo", "--seeds", "0", "--out", tmp_path / "report"], "--seeds")
    assert not (tmp_path / "report").exists() and time.perf_counter() - start < 5.0


def test_inits_plot_with_one_depth_is_refused_before_the_sweep(tmp_path):
    start = time.perf_counter()
    refused(["inits", "--depths", "2", "--plot", tmp_path / "f.png"], "two or more depths")
    assert time.perf_counter() - start < 5.0


# -- confusing -----------------------------------------------------------------------------------------------------
def test_predict_takes_the_presets_batch_size(monkeypatch):
    """The loss's gradient scale follows the batch size: predict uses the preset's, as measure and compare do."""
    from sigprop.model import presets
    from sigprop.report.runs import Request, run_predict

    small = presets.Preset("small", SMALL_CONFIG | {"arch": "encoder"}, seeds=2, batch_size=3)
    monkeypatch.setitem(presets.PRESETS, "small", small)
    run = run_predict(Request(preset="small"))
    assert run.profile.rows == predict(small.config(), batch_size=3).rows
    assert run.profile.rows != predict(small.config(), batch_size=8).rows


def test_none_is_a_value_of_norm_and_norm_position():
    result = run_cli(["predict", *SMALL, "--set", "norm=none", "--set", "norm_position=none"])
    assert result.exit_code == 0 and "diagnosis (theory)" in result.stdout, result.output
    config = TransformerConfig(**SMALL_CONFIG).replace(norm="none", norm_position="none")
    assert not config.has_final_norm
    refused(["predict", "--set", "norm=nothing"], "norm must be one of", "'nothing'")


def test_errors_go_to_stderr_and_progress_is_printed_off_a_terminal():
    result = run_cli(["predict", *SMALL])
    assert result.exit_code == 0
    assert "predict 3 layers (forward, backward): 0/6" in result.stderr
    assert "predict 3 layers (forward, backward): 6/6" in result.stderr
    assert "diagnosis (theory)" in result.stdout and "error" not in result.stdout


def test_the_command_line_imports_no_heavy_module_for_its_help():
    """``sigprop --help`` stays fast because the command modules import neither torch, scipy nor matplotlib."""
    import subprocess
    import sys

    code = "import sys, sigprop.cli; print(sorted(m for m in ('torch', 'scipy', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_components_name_a_bad_width():
    from sigprop.components.attention_block import AttentionBlock
    from sigprop.components.ffn import FFNBlock

    with pytest.raises(ValueError, match="d must be"):
        FFNBlock(d=-4)
    with pytest.raises(ValueError, match="divisible"):
        AttentionBlock(d=10, n_heads=3)


def test_env(tmp_path):
    result = run_cli(["env", "--json", tmp_path / "env.json"])
    assert result.exit_code == 0 and "torch" in json.loads((tmp_path / "env.json").read_text())


def test_compare_measured_with_another_model_s_flags(tmp_path):
    """--measured takes its model from the file: --hf, --run and --fresh beside it were ignored and another model
    than the one asked for was compared."""
    measured = tmp_path / "m.json"
    assert run_cli(["measure", *SMALL, "--seeds", "2", "--batch-size", "2", "--synthetic", "--json",
                    str(measured)]).exit_code == 0
    refused(["compare", "--measured", str(measured), "--hf", str(tmp_path)], "--measured", "--hf")


def test_inits_token_resolved_without_a_batch():
    """predict refuses it; inits once wrote a table of every scheme refused and exited 0."""
    refused(["inits", *SMALL, "--token-resolved"], "--token-resolved", "add --data or --real")
    assert "--synthetic" not in run_cli(["inits", *SMALL, "--token-resolved"]).stderr  # an option inits lacks


def test_sizes_no_memory_holds():
    refused(["sde", "--samples", "1000000000"], "out of memory")


def test_verify_approx_unknown_to_a_later_component(tmp_path):
    """Checked before any sweep: relu's sweep once ran to its end before gelu refused the name, writing nothing."""
    start = time.perf_counter()
    refused(["verify", "--approx", "kedia_table1", "--quick", "relu", "gelu", "--json", str(tmp_path / "v.json")],
            "--approx", "'gelu'", "'kedia'")
    assert time.perf_counter() - start < 30 and not (tmp_path / "v.json").exists()


def test_seeds_of_a_trained_run(tmp_path):
    """A run's trained weights are one model: --seeds 3 was silently measured once."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    refused(["measure", "--run", str(run), "--seeds", "3"], "--run", "measured once", "--seeds")


def test_measure_json_of_a_scheme_whose_branches_start_at_zero(tmp_path):
    """SkipInit's β = 0 branch has no gradient correlation: its standard error over two seeds is NaN, which the JSON
    writer refused after all the work."""
    out = tmp_path / "m.json"
    done = run_cli(["measure", *SMALL, "--set", "init=skipinit", "--seeds", "2", "--batch-size", "2", "--synthetic",
                    "--json", str(out)])
    assert done.exit_code == 0, done.stderr
    assert run_cli(["compare", "--measured", str(out), "--json", str(tmp_path / "c.json")]).exit_code == 0


def test_data_python_is_the_larger_built_in_corpus_in_every_command(monkeypatch, tmp_path):
    """``--data python`` names the built-in corpus in predict / measure / compare / inits as in train (it was read
    as a missing folder); a folder of that name is ``./python``."""
    import sigprop.data.batches as data_batches
    from sigprop.data.corpus import PYTHON_CORPUS
    from sigprop.report.runs import Request

    asked = []

    def fake_load_batch(batch_size, seq_len, path=None, vocab_size=8192, seed=0):
        asked.append(path)
        return torch.randint(5, vocab_size, (batch_size, seq_len), generator=torch.Generator().manual_seed(seed))

    monkeypatch.setattr(data_batches, "load_batch", fake_load_batch)
    for command in ("predict", "measure", "inits"):
        result = run_cli([command, *SMALL, "--data", "python", "--batch-size", "2",
                          *(["--seeds", "1"] if command == "measure" else [])])
        assert result.exit_code == 0, result.output
    assert asked == [PYTHON_CORPUS] * 3
    assert Request(data="python").data == PYTHON_CORPUS
    stored = tmp_path / "m.json"  # a measurement on it is compared later on the same corpus
    assert run_cli(["measure", *SMALL, "--data", "python", "--batch-size", "2", "--seeds", "1", "--json",
                    str(stored)]).exit_code == 0
    result = run_cli(["compare", "--measured", str(stored)])
    assert result.exit_code == 0 and asked[-1] == PYTHON_CORPUS, result.output
    monkeypatch.chdir(tmp_path)
    refused(["predict", *SMALL, "--data", "./python"], "--data", "not found")
    (tmp_path / "python").mkdir()
    assert Request(data="./python").data == tmp_path.joinpath("python").relative_to(tmp_path)
