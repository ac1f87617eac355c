"""``sigprop fold RUN_DIR OUT --to hf-gpt2 | hf-opt``: a trained run, folded and exported, loads with
``from_pretrained`` and gives the run's logits (skipped without ``transformers``)."""

from __future__ import annotations

import shutil

import pytest
import torch

transformers = pytest.importorskip("transformers")

from sigprop.model.config import config_from_dict  # noqa: E402
from sigprop.model.transformer import Transformer  # noqa: E402
from sigprop.train.checkpoint import latest_checkpoint, load_checkpoint, model_state  # noqa: E402
from sigprop.train.run_dir import read_run  # noqa: E402
from tests.helpers import CliResult, run_cli  # noqa: E402

from .conftest import tiny_args  # noqa: E402

#: The runs these tests fold: a Pre-LN decoder (GPT-2's), a Post-LN one (OPT's), a Post-LN encoder (BERT's) and a
#: Llama-style decoder, all of 4 layers; and a DeepScaleLM decoder of 2 layers, whose λ = 0 leaves nothing to fold.
PRE = ("n_layers=4",)
POST = ("n_layers=4", "norm_position=post")
ENCODER = ("n_layers=4", "norm_position=post", "arch=encoder")
LLAMA = ("n_layers=4", "norm=rmsnorm", "position=rope", "activation=swiglu", "n_kv_heads=1", "tie_head=false")
TWO_LAYERS = ()


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """``trained(model, steps)``: the folder of a tiny run of ``model`` (extra ``--set`` items) trained for
    ``steps`` steps, trained once for the module's tests, which only read it."""
    root, runs = tmp_path_factory.mktemp("runs"), {}

    def run(model: tuple[str, ...], steps: int):
        if (model, steps) not in runs:
            out = root / f"run-{len(runs)}"
            done = run_cli(["train", *tiny_args(corpus, f"steps={steps}", f"checkpoint_every={steps}", model=model),
                            "--out", str(out)])
            assert done.exit_code == 0, done.stderr
            runs[model, steps] = out
        return runs[model, steps]

    return run


def fold(*args: str) -> CliResult:
    """``sigprop fold ARGS`` in this process: neither folding nor training needs a process of its own."""
    return run_cli(["fold", *args])


def _same_logits(run, out):
    """The relative difference of the run's and its export's float64 logits."""
    config = config_from_dict(read_run(run)["model_config"])
    model = Transformer(config)
    model.load_state_dict(model_state(load_checkpoint(latest_checkpoint(run))))
    model = model.double().eval()
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64).eval()
    ids = torch.randint(5, config.vocab_size, (2, config.seq_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = model(ids), hf(ids).logits
    return float((ours - theirs).norm() / ours.norm())


def test_fold_a_trained_run_into_gpt2(trained, tmp_path):
    run = trained(PRE, 4)
    out = tmp_path / "gpt2"
    done = fold(str(run), str(out), "--to", "hf-gpt2")
    assert done.exit_code == 0, done.output
    # trained λ, β are DSLM's constants; the fold is exact up to the norms' eps (1e-5): see tests/fix
    assert _same_logits(run, out) <= 1e-4


def test_fold_errors(trained, tmp_path):
    done = fold(str(tmp_path / "nowhere"), str(tmp_path / "out"))
    assert done.exit_code == 2 and "run directory" in done.stderr
    run = trained(POST, 2)
    done = fold(str(run), str(tmp_path / "out"))
    assert done.exit_code == 2 and "norm_position" in done.stderr and not (tmp_path / "out").exists()
    done = fold(str(run), str(tmp_path / "opt"), "--to", "hf-opt")  # a Post-LN decoder is OPT's
    assert done.exit_code == 0, done.output
    assert _same_logits(run, tmp_path / "opt") <= 1e-4
    run = trained(TWO_LAYERS, 2)  # DeepScaleLM at N = 2: λ = 0, no skip connection to fold
    done = fold(str(run), str(tmp_path / "out"))
    assert done.exit_code == 2 and "λ = 0" in done.stderr and "Traceback" not in done.stderr
    (tmp_path / "a-file").write_text("")  # OUT under a file: said before the model is read and converted
    done = fold(str(trained(PRE, 2)), str(tmp_path / "a-file" / "out"))
    assert done.exit_code == 2 and "OUT (its folder" in done.stderr and "is a file" in done.stderr


def test_the_export_carries_the_runs_tokenizer(corpus, trained, tmp_path):
    """``AutoTokenizer.from_pretrained(OUT)`` encodes 1,000 lines of the run's corpus to the very ids sigprop's
    tokenizer gives them, special tokens included, for each export target; a Llama-style run exported as Llama
    gives the run's logits."""
    from sigprop.data.tokenizer import SPECIAL_TOKENS, load_or_train_tokenizer

    lines = [line for f in sorted(corpus.glob("*.py")) for line in f.read_text(encoding="utf-8").splitlines()
             if line.strip()][:1000]
    assert len(lines) == 1000
    for target, model in (("hf-gpt2", PRE), ("hf-opt", POST), ("hf-bert", ENCODER), ("hf-llama", LLAMA)):
        run = trained(model, 4 if model == PRE else 2)
        out = tmp_path / target
        done = fold(str(run), str(out), "--to", target)
        assert done.exit_code == 0, done.output
        assert "tokenizer.json" in done.stdout
        ours = load_or_train_tokenizer(corpus, config_from_dict(read_run(run)["model_config"]).vocab_size)
        theirs = transformers.AutoTokenizer.from_pretrained(str(out))
        assert [t.ids for t in ours.encode_batch(lines)] == theirs(lines)["input_ids"]
        assert theirs.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == [0, 1, 2, 3, 4]
        assert theirs.mask_token == "[MASK]" and theirs.pad_token_id == 0
        if target == "hf-llama":  # a Llama-style run loads with from_pretrained and gives its logits
            assert _same_logits(run, out) <= 1e-4


def test_fold_never_writes_over_a_run(trained, tmp_path):
    """The export replaces its folder whole: the run's own folder, a folder holding it, or another run's folder
    is refused before anything is written, and the run is left as it was."""
    run = trained(PRE, 4)
    before = sorted(p.name for p in run.iterdir())
    for out in (run, run.parent):
        done = fold(str(run), str(out), "--to", "hf-gpt2")
        assert done.exit_code == 2 and "replaces its folder whole" in done.stderr, done.output
    other = trained(PRE, 2)
    done = fold(str(run), str(other), "--to", "hf-gpt2")  # another run
    assert done.exit_code == 2 and "holds a training run" in done.stderr, done.output
    experiment = tmp_path / "experiment"  # a folder of runs (an experiment's), the run elsewhere
    shutil.copytree(other, experiment / other.name)
    done = fold(str(run), str(experiment), "--to", "hf-gpt2")
    assert done.exit_code == 2 and "holds a training run" in done.stderr, done.output
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    done = fold(str(run), str(tmp_path / "notes"), "--to", "hf-gpt2")
    assert done.exit_code == 2 and "not a Hugging Face checkpoint" in done.stderr
    assert sorted(p.name for p in run.iterdir()) == before and (other / "run.json").exists()
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"
    done = fold(str(run), str(tmp_path / "export"), "--to", "hf-gpt2")
    assert done.exit_code == 0, done.output
    done = fold(str(run), str(tmp_path / "export"), "--to", "hf-gpt2")  # an export is replaced by a new one
    assert done.exit_code == 0, done.output
    (tmp_path / "project").mkdir()  # a folder with a config.json among other files is no checkpoint
    for name in ("config.json", "notes.txt"):
        (tmp_path / "project" / name).write_text("{}")
    (tmp_path / "project" / "src").mkdir()
    done = fold(str(run), str(tmp_path / "project"), "--to", "hf-gpt2")
    assert done.exit_code == 2 and "notes.txt, src/" in done.stderr, done.output
    assert sorted(p.name for p in (tmp_path / "project").iterdir()) == ["config.json", "notes.txt", "src"]


def test_a_corpus_changed_since_the_run_gets_no_tokenizer(corpus, tmp_path):
    """A run's tokenizer is rebuilt from its corpus: where the corpus changed after training (its data fingerprint
    in run.json differs), the rebuilt tokenizer would give other ids, so the export carries none and says why."""
    data = tmp_path / "corpus"
    shutil.copytree(corpus, data)
    run = tmp_path / "run"
    done = run_cli(["train", *tiny_args(data, "steps=2", "checkpoint_every=2", model=PRE), "--out", str(run)])
    assert done.exit_code == 0, done.stderr
    extra = sorted(corpus.glob("*.py"))[0]
    (data / "added.py").write_text(extra.read_text(encoding="utf-8") * 3, encoding="utf-8")
    done = fold(str(run), str(tmp_path / "out"), "--to", "hf-gpt2")
    assert done.exit_code == 0, done.output
    said = " ".join(done.stdout.split())  # the terminal wraps long lines
    assert "has changed since it trained" in said and "no tokenizer" in said, done.stdout
    assert not (tmp_path / "out" / "tokenizer.json").exists() and (tmp_path / "out" / "config.json").exists()
