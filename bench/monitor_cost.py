"""Benchmark: the amortised cost of ``sigprop.Monitor`` at ``every=100`` in three training loops, measured in one run.

Run: python bench/monitor_cost.py [--steps 300] [--every 100] [--layers 6] [--width 128] [--batch 8] [--seq 64]
     [--threads 1]

The same GPT-2 (``transformers.GPT2LMHeadModel`` from its config, dropout on) is trained for ``--steps`` optimiser
steps with AdamW on random tokens, in

* plain      a hand-written loop, ``monitor.step(step)`` after each optimiser step;
* hf         the Hugging Face ``Trainer`` with ``sigprop.integrations.hf.SigpropCallback``;
* lightning  a Lightning ``Trainer`` (a ``LightningModule`` holding the GPT-2) with
             ``sigprop.integrations.lightning.SigpropCallback``;

each once with the monitor and once without, and the probe batch is as large as a training batch. For every loop it
prints: the median optimiser step (without the monitor), the median time of one point (the probe: forward and
backward to the sites, the statistics, the diagnosis, the reporters), the one-off cost of the first point's theory,
and two ratios: **amortised** = (time in the monitor's points, the first point's theory excluded) / (the run's time
without the monitor), and **end to end** = (the run's time with the monitor, theory excluded) / (without) − 1, which
also carries the noise of a shared machine (a few percent on 2 CPU cores). ``every`` steps of training pay for one
point, so the amortised cost is about (point / step) / every.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time

import torch

from sigprop.monitor import monitor as monitor_module


class Timer:
    """Wall time spent in ``Monitor.step`` calls that recorded a point and in ``Monitor.predict``, patched in."""

    def __init__(self):
        self.points: list[float] = []
        self.theory = 0.0

    @contextlib.contextmanager
    def patched(self):
        cls = monitor_module.Monitor
        step, predict = cls.step, cls.predict
        timer = self

        def timed_step(self, n):
            t0 = time.perf_counter()
            theory0 = timer.theory
            point = step(self, n)
            if point is not None:
                timer.points.append(time.perf_counter() - t0 - (timer.theory - theory0))
            return point

        def timed_predict(self, n=0):
            t0 = time.perf_counter()
            out = predict(self, n)
            timer.theory += time.perf_counter() - t0
            return out

        cls.step, cls.predict = timed_step, timed_predict
        try:
            yield self
        finally:
            cls.step, cls.predict = step, predict


def gpt2(args):
    import transformers

    config = transformers.GPT2Config(vocab_size=args.vocab, n_positions=args.seq, n_embd=args.width,
                                     n_layer=args.layers, n_head=4)
    transformers.set_seed(0)
    return transformers.GPT2LMHeadModel(config)


def ids(args, seed: int, n: int | None = None) -> torch.Tensor:
    return torch.randint(0, args.vocab, (n or args.batch, args.seq), generator=torch.Generator().manual_seed(seed))


def plain_loop(args, monitored: bool) -> tuple[float, list[float]]:
    """(wall time, step times) of the hand-written loop."""
    import sigprop

    model = gpt2(args)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    monitor = sigprop.Monitor(model, {"input_ids": ids(args, 99)}, every=args.every) if monitored else None
    steps = []
    t_run = time.perf_counter()
    if monitor is not None:
        monitor.step(0)
    for step in range(args.steps):
        t0 = time.perf_counter()
        batch = ids(args, step)
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps.append(time.perf_counter() - t0)
        if monitor is not None:
            monitor.step(step + 1)
    return time.perf_counter() - t_run, steps


class _Ids(torch.utils.data.Dataset):
    def __init__(self, args):
        self.data = ids(args, 7, args.steps * args.batch)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}


def hf_loop(args, monitored: bool, out: str) -> tuple[float, list[float]]:
    import transformers

    from sigprop.integrations.hf import SigpropCallback

    class StepTimes(transformers.TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], None

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.t0)

    times = StepTimes()
    callbacks = [times] + ([SigpropCallback({"input_ids": ids(args, 99)}, every=args.every)] if monitored else [])
    training = transformers.TrainingArguments(
        output_dir=out, max_steps=args.steps, per_device_train_batch_size=args.batch, learning_rate=1e-4,
        logging_steps=args.every, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0)
    trainer = transformers.Trainer(model=gpt2(args), args=training, train_dataset=_Ids(args), callbacks=callbacks)
    trainer.remove_callback(transformers.PrinterCallback)  # its log lines would interleave with the table
    t0 = time.perf_counter()
    trainer.train()
    return time.perf_counter() - t0, times.times


def lightning_loop(args, monitored: bool, out: str) -> tuple[float, list[float]]:
    import lightning.pytorch as pl

    from sigprop.integrations.lightning import SigpropCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.gpt = gpt2(args)

        def forward(self, input_ids):
            return self.gpt(input_ids=input_ids).logits

        def training_step(self, batch, batch_idx):
            return self.gpt(**batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    class StepTimes(pl.Callback):
        def __init__(self):
            self.times, self.t0 = [], None

        def on_train_batch_start(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.t0)

    times = StepTimes()
    loader = torch.utils.data.DataLoader(_Ids(args), batch_size=args.batch)
    callbacks = [times] + ([SigpropCallback(ids(args, 99), every=args.every)] if monitored else [])
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, callbacks=callbacks,
                         logger=pl.loggers.CSVLogger(out), enable_progress_bar=False, enable_checkpointing=False,
                         enable_model_summary=False, log_every_n_steps=args.every)
    module = Module()
    t0 = time.perf_counter()
    trainer.fit(module, loader)
    return time.perf_counter() - t0, times.times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="/tmp/sigprop-monitor-cost")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    os.environ.setdefault("WANDB_MODE", "disabled")
    loops = {"plain": lambda m: plain_loop(args, m),
             "hf": lambda m: hf_loop(args, m, os.path.join(args.out, f"hf-{m}")),
             "lightning": lambda m: lightning_loop(args, m, os.path.join(args.out, f"lightning-{m}"))}
    print(f"GPT-2 of {args.layers} layers, d = {args.width}, batch {args.batch} × {args.seq} tokens, {args.steps} "
          f"steps, every = {args.every}, {args.threads} thread(s), torch {torch.__version__}")
    print(f"{'loop':<10} {'step ms':>8} {'point ms':>9} {'theory s':>9} {'points':>7} {'amortised':>10} "
          f"{'end to end':>11}")
    for name, run in loops.items():
        bare, steps = run(False)
        with Timer().patched() as timer:
            watched, _ = run(True)
        spent = sum(timer.points)
        print(f"{name:<10} {1e3 * statistics.median(steps):8.1f} {1e3 * statistics.median(timer.points):9.1f} "
              f"{timer.theory:9.2f} {len(timer.points):7d} {spent / bare:10.2%} "
              f"{(watched - timer.theory) / bare - 1:11.2%}")


if __name__ == "__main__":
    main()
