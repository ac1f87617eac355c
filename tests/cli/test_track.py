"""``sigprop track plot``: the figure of any monitored run (here a nanoGPT-style module in a plain loop), and bad
input as one line with exit status 2."""

from __future__ import annotations

import torch

import sigprop
from tests.helpers import run_cli
from tests.monitor.nanogpt import NanoGPT, nanogpt_batch, nanogpt_loss


def _monitored_run(log_dir):
    torch.manual_seed(0)
    model = NanoGPT(n_layer=3)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    with sigprop.Monitor(model, nanogpt_batch(99), every=2, loss_fn=nanogpt_loss, log_dir=log_dir) as monitor:
        monitor.step(0)
        for step in range(1, 7):
            nanogpt_loss(model, nanogpt_batch(step)).backward()
            optimizer.step()
            optimizer.zero_grad()
            monitor.step(step)


def test_track_plot_draws_a_monitored_run(tmp_path):
    _monitored_run(tmp_path / "run")
    result = run_cli(["track", "plot", tmp_path / "run"])
    figure = tmp_path / "run" / "track.png"
    assert result.exit_code == 0, result.output
    assert str(figure) in result.output and figure.stat().st_size > 10_000
    result = run_cli(["track", "plot", tmp_path / "run", "--out", tmp_path / "elsewhere.png"])
    assert result.exit_code == 0 and (tmp_path / "elsewhere.png").stat().st_size > 10_000


def test_track_plot_refuses_bad_input_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    _monitored_run(tmp_path / "run")
    cases = [([tmp_path / "missing"], "is not a folder"), ([tmp_path / "empty"], "holds no track.jsonl points"),
             ([tmp_path / "run", "--out", tmp_path / "figure.jpg"], "must end in .png"),
             ([tmp_path / "run", "--out", "/proc/figure.png"], "cannot write in /proc")]
    for args, said in cases:
        result = run_cli(["track", "plot", *args])
        assert result.exit_code == 2, (args, result.output)
        assert said in result.output and result.output.strip().count("\n") == 0, result.output
