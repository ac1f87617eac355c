"""The options several commands share, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..components.draws import DEFAULT_HEADS

__all__ = ["Preset", "ConfigFile", "Overrides", "Seeds", "BatchSize", "Data", "Synthetic", "FirstSeed", "Device",
           "AttentionHeads", "TokenResolved", "Spread", "JsonOut", "PlotOut", "DEFAULT_HEADS"]

Preset = Annotated[str, typer.Option(help="Start from a named preset (see `sigprop compare --list-presets`).")]
ConfigFile = Annotated[Path, typer.Option("--config", help="A JSON file of TransformerConfig fields (applied over "
                                          "the preset), or a profile or comparison JSON whose config is reused.")]
Overrides = Annotated[list[str], typer.Option("--set", help="Override one config field, e.g. --set n_layers=48 "
                                              "--set norm_position=post (repeatable; `none` is None only for "
                                              "fields that may be None).")]
Seeds = Annotated[int, typer.Option(help="Independently initialised models to average, >= 1 (default: the "
                                    "preset's, else 4).")]
BatchSize = Annotated[int, typer.Option(help="Sequences (or images) per batch, >= 1 (default: the preset's, else 8).")]
Data = Annotated[str, typer.Option(help="Text file or folder to read (default: the Python standard library; "
                                  "'python': the standard library and the installed packages, a folder of that "
                                  "name is ./python); for a patch (ViT) model a folder of images (subfolders as "
                                  "classes) or a .npy array (default: scikit-learn's bundled digits).")]
Synthetic = Annotated[bool, typer.Option(help="Synthetic inputs instead of real data: i.i.d. Zipf(1) tokens, or for "
                                         "a patch model i.i.d. uniform pixels and random classes.")]
FirstSeed = Annotated[int, typer.Option(help="The first seed: models FIRST … FIRST + seeds − 1 are measured (disjoint "
                                        "slices on several machines merge exactly with `sigprop measure --merge`).")]
Device = Annotated[str, typer.Option(help="Torch device for the models, e.g. cuda or cuda:1 (default: cpu); a "
                                     "comma-separated list (cuda:0,cuda:1) measures the seeds on all of them in "
                                     "parallel, one process each, with the same result.")]
AttentionHeads = Annotated[int, typer.Option(
    help="Heads drawn per layer by the sampled attention rule, >= 2 (used for large attention scores and causal "
         "masks; its standard error falls like 1/sqrt(heads) and its cost grows with them: "
         "docs/results/performance.md).")]
TokenResolved = Annotated[bool, typer.Option(
    "--token-resolved/--exchangeable",
    help="Moments from each sequence's token Gram matrix (repeated tokens, [MASK], the labelled positions and a "
         "decoder's positions kept apart). Default with a batch of token ids: the forward sweep, and a decoder's "
         "backward sweep. --token-resolved: an encoder's backward sweep too, from its labelled positions. "
         "--exchangeable: one correlation for every token pair, as the paper.")]
Spread = Annotated[bool, typer.Option(
    "--spread",
    help="Also predict each layer's seed-to-seed spread at finite width: the standard deviation across weight draws "
         "of log σ²_x (given the embedding) and of log σ²_g relative to the top layer (a Monte Carlo of one layer "
         "at a few depths, accumulated along the stack; an encoder or a decoder, not an encoder-decoder). `compare` "
         "then judges each measured seed mean against the predicted 95% band of a mean of that many seeds and draws "
         "the band; `doctor` gives the interval of one model's first-layer gradient ratio.")]
JsonOut = Annotated[Path, typer.Option("--json", help="Write the result as JSON here (checked before any work).")]
HFModel = Annotated[Path, typer.Option(
    "--hf", help="A Hugging Face model: a local folder, its config.json or a model id in the local Hugging Face cache "
    "(nothing is downloaded; the extra `hf`), mapped to sigprop's config (sigprop.from_hf). A folder's saved weights "
    "are the model: measured once, as they are, and read by the theory (each weight's standard deviation).")]
RunDir = Annotated[Path, typer.Option(
    "--run", help="A training run's folder (`sigprop train --out`): its newest checkpoint is the model, measured "
    "once as it is and read by the theory (each weight's standard deviation; trained weights make it an "
    "approximation, and the output says where).")]
Fresh = Annotated[bool, typer.Option(
    "--fresh", help="With --hf or --run: a freshly initialised model of its configuration instead of its saved "
    "weights.")]
CsvOut = Annotated[Path, typer.Option("--csv", help="Write a table as CSV here: a row per site (per layer for a "
                                      "comparison), a column per statistic (a .csv path, checked before any work).")]
PlotOut = Annotated[Path, typer.Option("--plot", help="Write a PNG figure here (a .png path, checked before any "
                                       "work).")]
