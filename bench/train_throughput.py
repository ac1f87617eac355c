"""Training-step throughput, as ratios measured in one run.

    PYTHONPATH=. python3 bench/train_throughput.py --device cuda [--compile] [--json OUT]
    python bench/train_throughput.py [--quick] [--compile] [--steps N] [--json OUT]      (CPU, scaled down)

One training step is: forward, summed cross-entropy in float32 over the next-token labels (as
:func:`sigprop.model.objective.objective_sums` computes it, the same code for every model), backward, AdamW step
(:func:`sigprop.train.optim.parameter_groups`, identical for every model). On a GPU the forward runs under bf16
autocast and AdamW is the fused kernel; on a CPU everything is float32 and AdamW the default one. Every number is the
median wall time of ``--steps`` timed steps after warm-up steps, the models of a comparison timed in interleaved
rounds (the order rotated each round; ``torch.cuda.synchronize`` around every timed step on a GPU), so the ratios
are measured in this run on this machine.

1. Models of one shape (GPU: GPT-2 small, 12 layers, d = 768, 12 heads, 1024 tokens, vocabulary 50257, batch 8):
   sigprop's pre-LN decoder (GELU, Xavier, no dropout, tied head) against Hugging Face's ``GPT2LMHeadModel``
   (SDPA attention, no dropout; skipped with a note when ``transformers`` is missing) and against
   ``torch.nn.TransformerEncoder`` (causal mask, ``norm_first``, ``batch_first``) with token + position embeddings,
   a final LayerNorm and a tied head. Eager, and with ``--compile`` compiled too (sigprop: every layer compiled,
   :func:`sigprop.train.speed.compile_layers`; the others: ``torch.compile(model)``); the compile time is the
   first warm-up step's.
2. Deep-thin against shallow-wide at equal N·d² (GPU: 12×1024, 48×512, 192×256, heads of 64, 16 sequences of 512
   tokens, vocabulary 8192 so that the head stays a small share): each step time as a ratio to the shallow-wide one
   (with ``--compile`` compiled too).
3. The cost of tracking (``--track-every 1``): a plain step against a step followed by
   ``sigprop.measurement.hooks.measure(model, batch)`` as the trainer's tracker calls it (outside autocast, in a
   forked RNG; one probe forward + backward with hooks recording every site; the tracker's diagnosis and its line in
   track.jsonl are not included), for a deep model (GPU: 192 layers, d = 256, 4 sequences of 128 tokens); the ratio
   of a recorded step to a plain one and the amortised cost at ``--track-every 100``, 1 + (ratio − 1)/100. Eager.

On a CPU the shapes are scaled down (``--quick``: smaller still and fewer steps, well under a minute; on a GPU
``--quick`` keeps the shapes and takes fewer steps) and one thread is used unless ``--threads`` says otherwise (on a
shared machine several threads make small steps stall unpredictably). The issue's targets are for a GPU: on a CPU
they are printed without a verdict, on a GPU each gets PASS or FAIL: deep-thin 48×512 within 1.15× and 192×256
within 1.5× of 12×1024; sigprop at least as fast as HF GPT-2, eager and compiled; tracking at --track-every 100
under 2% and one recorded step at most 1.3× a plain one. A row that fails (out of memory, say) is reported, the
other rows still run, and the exit status is 1; a missed target does not change the exit status.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from sigprop.measurement.hooks import measure
from sigprop.model.config import TransformerConfig
from sigprop.model.objective import make_batch, objective_sums
from sigprop.model.transformer import seeded_model
from sigprop.train.optim import parameter_groups
from sigprop.train.speed import autocast_for, compile_layers

LR, WEIGHT_DECAY = 1e-4, 0.01
#: The tracker's probe seed is its own; any fixed number reproduces its cost.
PROBE_SEED = 12345


@dataclass(frozen=True)
class Shape:
    n_layers: int
    d_model: int
    n_heads: int
    seq: int
    batch: int
    vocab: int

    def label(self) -> str:
        return f"{self.n_layers}x{self.d_model} h{self.n_heads}"

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


def _deep(widths_depths, seq, batch, vocab):
    return [Shape(n, d, max(1, d // 64), seq, batch, vocab) for n, d in widths_depths]


#: (models, deep-thin sweep, tracking) per setting.
SHAPES = {
    "cuda": (Shape(12, 768, 12, 1024, 8, 50257),
             _deep(((12, 1024), (48, 512), (192, 256)), 512, 16, 8192),
             Shape(192, 256, 4, 128, 4, 8192)),
    "cpu": (Shape(4, 128, 4, 128, 8, 8192),
            _deep(((3, 256), (12, 128), (48, 64)), 128, 8, 2048),
            Shape(24, 64, 1, 64, 4, 8192)),
    "cpu-quick": (Shape(2, 64, 2, 64, 4, 2048),
                  _deep(((2, 128), (8, 64), (32, 32)), 64, 4, 1024),
                  Shape(12, 64, 1, 32, 4, 2048)),
}

#: (key, description, limit): a ratio passes when it is at most its limit (the tracking one: below it).
TARGETS = (
    ("deep_mid", "deep-thin {mid} / shallow-wide {wide} step time", 1.15),
    ("deep_deepest", "deep-thin {deep} / shallow-wide {wide} step time", 1.5),
    ("sigprop_over_hf", "sigprop / HF GPT-2 step time (sigprop at least as fast)", 1.0),
    ("recorded_over_plain", "recorded step / plain step (--track-every 1)", 1.3),
    ("amortised_100", "amortised step cost at --track-every 100 (under 2%)", 1.02),
    ("recorded_over_plain_default_probe", "recorded step / plain step, the trainer's probe of 4 beside a batch of 16",
     1.3),
)


# models -------------------------------------------------------------------------------------------------------------
def sigprop_model(s: Shape, device):
    config = TransformerConfig(arch="decoder", n_layers=s.n_layers, d_model=s.d_model, n_heads=s.n_heads,
                               seq_len=s.seq, max_len=s.seq, vocab_size=s.vocab, dropout=0.0, norm_position="pre",
                               init="xavier", activation="gelu")
    return seeded_model(config, seed=0, device=device)


def hf_model(s: Shape, device):
    """(GPT2LMHeadModel of shape ``s``, attention implementation), or (None, why not)."""
    try:
        import transformers
    except ImportError:
        return None, "transformers is not installed"
    kwargs = dict(n_layer=s.n_layers, n_embd=s.d_model, n_head=s.n_heads, n_positions=s.seq, vocab_size=s.vocab,
                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=s.vocab - 1, eos_token_id=s.vocab - 1)
    try:
        config = transformers.GPT2Config(**kwargs, attn_implementation="sdpa")
    except (TypeError, ValueError):
        config = transformers.GPT2Config(**kwargs)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).to(device).train()
    return model, getattr(model.config, "_attn_implementation", "unknown")


class TorchDecoder(nn.Module):
    """``torch.nn.TransformerEncoder`` as a causal LM: token + learned position embeddings (std 0.02, as GPT-2),
    pre-LN GELU layers with a causal mask, a final LayerNorm and a head tied to the token embedding."""

    def __init__(self, s: Shape):
        super().__init__()
        self.token = nn.Embedding(s.vocab, s.d_model)
        self.pos = nn.Embedding(s.seq, s.d_model)
        for e in (self.token, self.pos):
            nn.init.normal_(e.weight, std=0.02)
        layer = nn.TransformerEncoderLayer(s.d_model, s.n_heads, 4 * s.d_model, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, s.n_layers, norm=nn.LayerNorm(s.d_model),
                                             enable_nested_tensor=False)
        self.head = nn.Linear(s.d_model, s.vocab, bias=False)
        self.head.weight = self.token.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(s.seq), persistent=False)

    def forward(self, ids):
        L = ids.shape[-1]
        x = self.token(ids) + self.pos(torch.arange(L, device=ids.device))
        return self.head(self.encoder(x, mask=self.mask[:L, :L], is_causal=True))


def _sums(logits, labels):
    """The training step's objective_sums arithmetic on a reference model's logits: summed float32 cross-entropy and
    label count (no top-1 count, as in training)."""
    logits = logits.reshape(-1, logits.shape[-1]).float()
    labels = labels.reshape(-1)
    keep = labels != -100
    total = F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
    return total, keep.sum(), torch.zeros((), dtype=torch.long)


LOSSES = {
    "sigprop": lambda net, b: objective_sums(net, b, top1=False),
    "hf": lambda net, b: _sums(net(input_ids=b["inputs"], use_cache=False).logits, b["labels"]),
    "torch": lambda net, b: _sums(net(b["inputs"]), b["labels"]),
}


class Runner:
    """One model's training step: ``step()`` runs forward (autocast on a GPU), loss, backward and AdamW."""

    def __init__(self, kind: str, model, batch, device, probe=None):
        self.kind, self.model, self.net, self.batch, self.device = kind, model, model, batch, device
        self.probe = batch if probe is None else probe
        fused = {"fused": True} if device.type == "cuda" else {}
        self.opt = torch.optim.AdamW(parameter_groups(model, WEIGHT_DECAY), lr=LR, **fused)
        self.precision = "bf16" if device.type == "cuda" else "fp32"

    def compile(self):
        if self.kind == "sigprop":
            compile_layers(self.model)
        else:
            self.net = torch.compile(self.model)

    def step(self):
        with autocast_for(self.precision, self.device):
            total, count, _ = LOSSES[self.kind](self.net, self.batch)
        self.opt.zero_grad(set_to_none=True)
        (total / count).backward()
        self.opt.step()

    def tracked_step(self):
        """A step, then the tracker's probe measurement (:meth:`sigprop.monitor.probe.Probe.measure`)."""
        self.step()
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(PROBE_SEED)
            measure(self.model, self.probe)


def token_batch(s: Shape, device, config=None):
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, s.vocab, (s.batch, s.seq), generator=gen)
    cfg = config or TransformerConfig(arch="decoder", vocab_size=s.vocab, max_len=s.seq, seq_len=s.seq)
    return {k: v.to(device) for k, v in make_batch(cfg, ids).to_dict().items()}


# timing -------------------------------------------------------------------------------------------------------------
def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fns: dict, device, warmup: int, steps: int, failures: list) -> dict:
    """{name: {"ms": median ms, "first_s": first warm-up step in seconds}} of interleaved, rotated rounds; a
    function that raises during its warm-up is dropped (recorded in ``failures``)."""
    out, live = {}, {}
    for name, fn in fns.items():
        try:
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            first = time.perf_counter() - t0
            for _ in range(warmup - 1):
                fn()
            sync(device)
        except Exception as e:  # out of memory, a compiler error: report the row, time the others
            failures.append(f"{name}: {_why(e)}")
            print(f"  FAILED {failures[-1]}", flush=True)
            _free(device)
            continue
        live[name], out[name] = fn, {"first_s": first, "times": []}
    names = list(live)
    for r in range(steps):
        for name in names[r % len(names):] + names[: r % len(names)]:
            sync(device)
            t0 = time.perf_counter()
            live[name]()
            sync(device)
            out[name]["times"].append(time.perf_counter() - t0)
    for v in out.values():
        v["ms"] = 1e3 * statistics.median(v["times"])
        v["times"] = [round(1e3 * t, 3) for t in v["times"]]
    return out


def _why(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:200] if lines else ''}"


def _free(device, reset_compiler=False):
    """Release a section's memory; at a section's end also the compiler's caches (the next section's shapes then
    compile afresh, as in a run that trains one shape)."""
    if reset_compiler:
        torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# sections -----------------------------------------------------------------------------------------------------------
def compare_models(s: Shape, device, args, rows, ratios, failures):
    batch = token_batch(s, device)
    runners, notes = {}, {}
    runners["sigprop"] = Runner("sigprop", sigprop_model(s, device), batch, device)
    hf, attn = hf_model(s, device)
    if hf is None:
        print(f"  HF GPT-2 skipped: {attn}")
        notes["hf"] = f"skipped: {attn}"
    else:
        runners["hf"] = Runner("hf", hf, batch, device)
        notes["hf"] = f"attention {attn}"
    torch.manual_seed(0)
    runners["torch"] = Runner("torch", TorchDecoder(s).to(device).train(), batch, device)
    names = {"sigprop": "sigprop", "hf": "HF GPT-2", "torch": "torch TransformerEncoder"}
    modes = ["eager"] + (["compiled"] if args.compile else [])
    for mode in modes:
        if mode == "compiled":
            for r in runners.values():
                r.compile()
        res = timed({k: r.step for k, r in runners.items()}, device,
                    args.warmup + (1 if mode == "compiled" else 0), args.steps, failures)
        ref = res.get("sigprop", {}).get("ms")
        for k, v in res.items():
            note = notes.get(k, "")
            if mode == "compiled":
                note = f"{note}{'; ' if note else ''}compile + first step {v['first_s']:.1f} s"
            rows.append(_row(f"models ({mode})", f"{names[k]} {s.label()}", v, s, ref, note))
        if hf is None:
            rows.append({"section": f"models ({mode})", "what": f"HF GPT-2 {s.label()}", "ms": None,
                         "tokens_per_s": None, "ratio": None, "note": notes["hf"]})
        if ref and "hf" in res:
            ratios[f"sigprop_over_hf_{mode}"] = ref / res["hf"]["ms"]
        if ref and "torch" in res:
            ratios[f"sigprop_over_torch_{mode}"] = ref / res["torch"]["ms"]
    if args.compile:
        for k in runners:
            e, c = (next((r["ms"] for r in rows if r["section"] == f"models ({m})" and r["what"].startswith(names[k])),
                         None) for m in ("eager", "compiled"))
            if e and c:
                ratios[f"compiled_over_eager_{k}"] = c / e
    del runners, hf
    _free(device, reset_compiler=True)


def deep_thin(shapes, device, args, rows, ratios, failures):
    runners = {s.label(): Runner("sigprop", sigprop_model(s, device), token_batch(s, device), device)
               for s in shapes}
    by_label = {s.label(): s for s in shapes}
    wide = shapes[0].label()
    for mode in ["eager"] + (["compiled"] if args.compile else []):
        if mode == "compiled":
            for r in runners.values():
                r.compile()
        res = timed({k: r.step for k, r in runners.items()}, device,
                    args.warmup + (1 if mode == "compiled" else 0), args.steps, failures)
        ref = res.get(wide, {}).get("ms")
        for k, v in res.items():
            note = f"compile + first step {v['first_s']:.1f} s" if mode == "compiled" else ""
            rows.append(_row(f"deep-thin ({mode})", f"sigprop {k}", v, by_label[k], ref, note))
        for key, s in (("deep_mid", shapes[1]), ("deep_deepest", shapes[2])):
            if ref and s.label() in res:
                ratios[f"{key}_{mode}"] = res[s.label()]["ms"] / ref
    del runners
    _free(device, reset_compiler=True)


def tracking(s: Shape, device, args, rows, ratios, failures):
    """The probe as large as the training batch (the reference's setting), then the trainer's default: a probe of
    ``TrainConfig().track_batch`` sequences beside a training batch four times larger."""
    from sigprop.train.config import TrainConfig

    model = sigprop_model(s, device)
    batch = token_batch(s, device, model.config)
    probe_n = TrainConfig().track_batch
    big = replace(s, batch=4 * probe_n)
    big_batch = token_batch(big, device, model.config)
    small_probe = {k: v[:probe_n] for k, v in big_batch.items()}
    same = Runner("sigprop", model, batch, device)
    default = Runner("sigprop", model, big_batch, device, probe=small_probe)
    res = timed({"plain": same.step, "recorded": same.tracked_step, "plain_big": default.step,
                 "recorded_big": default.tracked_step}, device, args.warmup, args.steps, failures)
    sites = len(model.sites())
    labels = {"plain": (s, "plain step", "plain"), "recorded": (s, "step + measure, probe = the batch", "plain"),
              "plain_big": (big, "plain step", "plain_big"),
              "recorded_big": (big, f"step + measure, probe of {probe_n} (the trainer's default)", "plain_big")}
    for k, v in res.items():
        shape, what, ref_key = labels[k]
        ref = res.get(ref_key, {}).get("ms")
        note = f"{sites} sites; measure in float32 (outside autocast)" if k.startswith("recorded") else ""
        rows.append(_row("tracking", f"sigprop {shape.label()} batch {shape.batch}: {what}", v, shape, ref, note))
    for plain, recorded, key in (("plain", "recorded", ""), ("plain_big", "recorded_big", "_default_probe")):
        if plain in res and recorded in res:
            ratio = res[recorded]["ms"] / res[plain]["ms"]
            ratios[f"recorded_over_plain{key}"] = ratio
            ratios[f"amortised_100{key}"] = 1 + (ratio - 1) / 100
    del same, default, model
    _free(device, reset_compiler=True)


def _row(section, what, v, s: Shape, ref, note=""):
    return {"section": section, "what": what, "ms": v["ms"], "tokens_per_s": s.tokens / (v["ms"] / 1e3),
            "ratio": v["ms"] / ref if ref else None, "note": note, "shape": asdict(s), "times_ms": v["times"],
            "first_step_s": v["first_s"]}


# report -------------------------------------------------------------------------------------------------------------
def _fmt(x, spec):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return f"{'—':>{spec.split('.')[0] or 1}}"
    return format(x, spec)


def print_table(rows):
    print(f"\n{'section':<20} {'what':<44} {'ms/step':>10} {'tokens/s':>11} {'ratio':>7}  note")
    section = None
    for r in rows:
        head = r["section"] if r["section"] != section else ""
        section = r["section"]
        print(f"{head:<20} {r['what']:<44} {_fmt(r['ms'], '10.2f')} {_fmt(r['tokens_per_s'], '11.0f')} "
              f"{_fmt(r['ratio'], '7.3f')}  {r['note']}")
    print("ratio: step time over the section's first row (sigprop; the shallow-wide model; the plain step)")


def judge(ratios, deep_shapes, on_gpu, modes) -> list:
    names = {"wide": deep_shapes[0].label().split()[0], "mid": deep_shapes[1].label().split()[0],
             "deep": deep_shapes[2].label().split()[0]}
    out = []
    for key, text, limit in TARGETS:
        keys = [f"{key}_{m}" for m in modes] if key in ("deep_mid", "deep_deepest", "sigprop_over_hf") else [key]
        if key == "sigprop_over_hf" and "compiled" not in modes:
            keys.append(None)
        for k in keys:
            v = ratios.get(k) if k else None
            strict = key.startswith("amortised_100")
            ok = None if v is None else (v < limit if strict else v <= limit)
            mode = "" if k is None or k == key else f" ({k.rsplit('_', 1)[1]})"
            if k is None:
                mode = " (compiled)"
            desc = f"{text.format(**names)}{mode} {'<' if strict else '≤'} {limit:g}"
            if k is None:
                verdict = "not run (use --compile)"
            elif v is None:
                verdict = "no measurement"
            elif on_gpu:
                verdict = "PASS" if ok else "FAIL"
            else:
                verdict = "(GPU target; not judged on a CPU)"
            out.append({"target": desc, "key": k, "value": v, "limit": limit,
                        "pass": ok if on_gpu and v is not None else None, "verdict": verdict})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N)")
    ap.add_argument("--quick", action="store_true", help="fewer timed steps; on a CPU smaller shapes too")
    ap.add_argument("--compile", action="store_true", help="also time compiled models (sections 1 and 2)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per row (default 20 cuda, 10 cpu; "
                    "--quick 5)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up steps per row (default 3, --quick 1; "
                    "one more when compiled)")
    ap.add_argument("--threads", type=int, default=1,
                    help="CPU threads (default 1: on a shared machine several threads make small steps stall "
                    "unpredictably; 0 = torch's default)")
    ap.add_argument("--json", help="write the settings, rows, ratios and targets here")
    args = ap.parse_args()
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if on_gpu and not torch.cuda.is_available():
        ap.error("--device cuda: no CUDA device is available")
    if args.steps is None:
        args.steps = 5 if args.quick else (20 if on_gpu else 10)
    if args.warmup is None:
        args.warmup = 1 if args.quick else 3
    if args.steps < 1 or args.warmup < 1:
        ap.error("--steps and --warmup must be >= 1")
    if args.threads < 0:
        ap.error("--threads must be >= 0")
    if args.threads and not on_gpu:
        torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    if args.compile:
        # every shape its own static graph, as a training run of one shape gets (no dynamic-shape recompile when the
        # deep-thin sweep's layers of other widths go through the same code)
        torch._dynamo.config.automatic_dynamic_shapes = False
    if on_gpu:
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
    setting = "cuda" if on_gpu else ("cpu-quick" if args.quick else "cpu")
    models, deep, track = SHAPES[setting]
    name = torch.cuda.get_device_name(device) if on_gpu else f"CPU, {torch.get_num_threads()} thread(s)"
    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    print(f"device: {name}; torch {torch.__version__}; transformers {tf_version or 'not installed'}; "
          f"{'bf16 autocast, fused AdamW' if on_gpu else 'float32, AdamW'}; {args.steps} timed steps after "
          f"{args.warmup} warm-up (median){'; compiled rows too' if args.compile else ''}", flush=True)
    t_start = time.perf_counter()
    rows, ratios, failures = [], {}, []
    sections = (
        (f"1. models of one shape: {models.label()}, batch {models.batch}x{models.seq}, vocab {models.vocab}",
         lambda: compare_models(models, device, args, rows, ratios, failures)),
        (f"2. deep-thin vs shallow-wide at equal N·d²: {', '.join(s.label() for s in deep)}, batch "
         f"{deep[0].batch}x{deep[0].seq}, vocab {deep[0].vocab}",
         lambda: deep_thin(deep, device, args, rows, ratios, failures)),
        (f"3. tracking cost: {track.label()}, batch {track.batch}x{track.seq}, vocab {track.vocab}",
         lambda: tracking(track, device, args, rows, ratios, failures)),
    )
    for title, run in sections:
        t0 = time.perf_counter()
        print(title, flush=True)
        try:
            run()
        except Exception as e:  # a step that fails after its warm-up: report it, run the next section
            failures.append(f"{title.split(':')[0]}: {_why(e)}")
            print(f"  FAILED {failures[-1]}", flush=True)
            _free(device, reset_compiler=True)
        print(f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    print_table(rows)
    print("\nratios:")
    for k, v in ratios.items():
        print(f"  {k:<32} {v:.3f}")
    modes = ["eager"] + (["compiled"] if args.compile else [])
    targets = judge(ratios, deep, on_gpu, modes)
    print("\ntargets" + ("" if on_gpu else " (for a GPU at the GPU shapes; on this CPU only for reference)") + ":")
    for t in targets:
        print(f"  {t['target']}: {_fmt(t['value'], '.3f')}  {t['verdict']}")
    wall = time.perf_counter() - t_start
    print(f"\nwall time {wall:.1f} s")
    if failures:
        print("failed rows:\n  " + "\n  ".join(failures))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "transformers": tf_version,
                       "settings": vars(args), "shapes": {"models": asdict(models), "deep": [asdict(s) for s in deep],
                                                          "tracking": asdict(track)},
                       "rows": rows, "ratios": ratios, "targets": targets, "failures": failures,
                       "wall_s": wall}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
