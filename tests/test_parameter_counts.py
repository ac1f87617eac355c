"""No function of the package takes more than ten parameters, except those named below with the reason: a longer
list is grouped into a dataclass (the training loop's :class:`~sigprop.train.fit._LoopSetup`)."""

from __future__ import annotations

import ast
from pathlib import Path

import sigprop

ROOT = Path(sigprop.__file__).parent
MOST = 10

_CLI = "a command: typer reads one parameter per command-line option"
_FRONT = "a public entry point whose keywords mirror its command's options (or the config fields it sets)"
_MODULE = "an nn.Module constructor taking the component's hyper-parameters by name, as torch's own modules do"
_RULE = ("a moment rule of attention: a pure function of the component's declared hyper-parameters (σ_q, σ_k, σ_v, "
         "heads, widths, dropout, causal, the sampling's draws), passed by name from the module")
_OPTIONS = "carries run_experiment's options (which mirror `sigprop experiment`'s) to the part that runs them"
_SPEC = ("a verify spec's constructor: its keywords are the fields of the ComponentSpec it builds "
         "(sigprop/verify/specs/common.py), each named at the call")
_SDE = "a figure of Noci et al. 2023 or its simulation: its keywords are the paper's settings, as `sigprop sde` sets"

JUSTIFIED = {
    **dict.fromkeys(["cli.apjn.apjn_command", "cli.experiment.experiment_command", "cli.inits.inits_command",
                     "cli.profiles.predict_command", "cli.profiles.measure_command", "cli.profiles.compare_command",
                     "cli.sde.sde_command", "cli.train.train_command", "cli.verify.verify_command"], _CLI),
    **dict.fromkeys(["analysis.experiment.compare_config", "apjn.hutchinson.apjn_pair", "apjn.hutchinson.measure_apjn",
                     "apjn.recurrence.apjn_profile", "data.batches.token_batches", "experiments.run.run_experiment",
                     "model.vit.vit_config", "theory.predict.Prediction.__init__", "theory.predict.predict"], _FRONT),
    **dict.fromkeys(["components.attention.MultiHeadAttention.__init__",
                     "components.attention_block.AttentionBlock.__init__",
                     "components.shaped_attention.ShapedAttention.__init__"], _MODULE),
    **dict.fromkeys(["components.attention.attention_forward", "components.attention.attention_backward",
                     "components.attention.mha_forward", "components.attention.mha_backward",
                     "components.attention_gram._value_free_gram", "components.attention_gram.gram_attention",
                     "components.attention_gram.gram_attention_backward",
                     "components.attention_sampled.sample_heads", "components.attention_sampled._sample",
                     "components.attention_sampled.sample_attention", "components.attention_sampled.sampled_forward",
                     "components.attention_sampled.sampled_backward",
                     "components.attention_bounded._one_head", "components.attention_bounded._sample",
                     "components.attention_bounded.bounded_forward", "components.attention_bounded.bounded_backward",
                     "components.attention_bounded.bounded_backward.one",
                     "components.attention_bounded.sample_bounded",
                     "components.attention_sampled.sampled_backward.one", "components.cross_attention._one.call",
                     "components.cross_attention.cross_forward", "components.cross_attention.cross_backward",
                     "components.cross_attention.cross_memory_backward", "components.cross_attention._sample_cross",
                     "components.cross_attention.sample_cross_attention",
                     "components.shaped_attention.shaped_attention_forward"], _RULE),
    **dict.fromkeys(["experiments.run._train", "experiments.run._run_evaluation"], _OPTIONS),
    "verify.specs.weighted.weighted_spec": _SPEC,
    **dict.fromkeys(["sde.experiments._attention_vs_sde", "sde.experiments.figure1", "sde.experiments.figure3",
                     "sde.experiments.figure5", "sde.experiments.figure7", "sde.experiments.figure8",
                     "sde.experiments.figure_options", "sde.experiments.simulate_sde", "sde.gradients.figure2",
                     "sde.integrate.euler_maruyama", "sde.network.simulate_network"], _SDE),
}


def _long_functions() -> dict[str, int]:
    """Qualified name (module path under sigprop, classes and enclosing functions) → parameter count, for every
    function with more than :data:`MOST` parameters (``self`` and ``cls`` not counted, ``*args`` / ``**kwargs``
    not counted)."""
    found = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                a = child.args
                names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
                if len(names) > MOST:
                    found[prefix + child.name] = len(names)
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        visit(ast.parse(path.read_text(encoding="utf-8")), module + ".")
    return found


def test_only_the_justified_functions_take_more_than_ten_parameters():
    found = _long_functions()
    unjustified = sorted(set(found) - set(JUSTIFIED))
    assert not unjustified, f"more than {MOST} parameters: {unjustified}: group them in a dataclass"
    stale = sorted(set(JUSTIFIED) - set(found))
    assert not stale, f"justified but no longer long (remove them from JUSTIFIED): {stale}"
