"""The per-layer seeds of the sampled attention rules (:mod:`sigprop.components.draws`)."""

from sigprop.components.draws import layer_context, layer_seed


def test_layer_context_gives_each_layer_and_sweep_its_own_seed_and_leaves_the_sweeps_context_alone():
    cache = {}
    ctx = {"attention_seed": 5, "attention_heads": 8, "attention_out": cache}
    forward = [layer_context(ctx, i)["attention_seed"] for i in range(64)]
    backward = [layer_context(ctx, i, backward=True)["attention_seed"] for i in range(64)]
    assert len(set(forward) | set(backward)) == 128
    assert forward[7] == layer_seed(5, 7) and backward[7] == layer_seed(5, 7, backward=True)
    assert ctx["attention_seed"] == 5  # the sweep's own seed is kept for the next layer
    assert layer_context(ctx, 3)["attention_out"] is cache  # the forward sweep's draws stay shared
    assert layer_context(ctx, 3)["attention_heads"] == 8
    assert layer_context({"attention_seed": 6}, 0)["attention_seed"] != forward[0]  # another sweep, other draws
