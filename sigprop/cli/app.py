"""The ``sigprop`` command line: the commands, and :func:`main`, the one error handler.

Every command parses its options, calls one library function and prints (the modules beside this one); none
catches an error itself. :func:`main` turns bad input (a ``ValueError`` and its kin, a usage error of the option
parser, a file that cannot be read or written) into one line on standard error, ``error: …``, and exit status 2;
Ctrl-C and SIGTERM into ``interrupted`` / ``terminated`` and 130 / 143, after the library has cleaned up (worker
processes stopped, no half-written file: every write is atomic); a training run whose loss stopped being finite
into its message and 3. Anything else is a bug and keeps its traceback.
The command modules import only typer and rich at import time, so ``sigprop --help`` stays fast. With the
environment variable ``SIGPROP_TRACEBACK=1`` bad input shows its traceback too.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings

import typer

from ..core.errors import DeviceError, Terminated, TrainingDiverged
from ..core.versions import VERSION
from .apjn import apjn_command
from .demo import demo_command
from .doctor import doctor_command
from .env import env_command
from .evaluate import eval_command
from .experiment import experiment_command
from .fold import fold_command
from .inits import inits_command
from .profiles import compare_command, measure_command, predict_command
from .sde import sde_command
from .terminal import error, note
from .track import track_app
from .train import train_app
from .verify import verify_command

__all__ = ["app", "main", "version_line", "INPUT_ERRORS"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="sigprop: signal propagation in deep transformers — predict, measure and fix the moments of activations "
         "and gradients at initialization.",
)


def version_line() -> str:
    """What ``sigprop --version`` prints.

    Returns:
        ``"sigprop X.Y.Z"``, the version being :data:`sigprop.__version__` (defined once, in
        :mod:`sigprop.core.versions`; the wheel's metadata reads it from there).

    Example:
        >>> version_line().split()[0]
        'sigprop'
    """
    return f"sigprop {VERSION}"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _options(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                          help="Print sigprop's version and exit.")) -> None:
    """The options that come before a command."""


COMMANDS = (
    ("predict", predict_command, "Every layer's moments at initialisation, from theory (no weights drawn)."),
    ("measure", measure_command, "The same statistics of real models, measured with hooks over seeds."),
    ("compare", compare_command, "Theory against measurement, layer by layer, with the errors and a diagnosis."),
    ("inits", inits_command, "Every init scheme at every depth, from theory, diagnosed (Kedia et al. Table 3)."),
    ("demo", demo_command, "Theory against measurement on the built-in default, with a report folder."),
    ("apjn", apjn_command, "The APJN of pre-LN and DyT/Derf transformers, theory against measurement (Alekseev)."),
    ("sde", sde_command, "Finite networks against the shaped Transformer's covariance SDEs (Noci et al.)."),
    ("verify", verify_command, "Every component's moment rules against Monte Carlo on the real module."),
    ("eval", eval_command, "A trained run's validation loss in float32 and with FP8 direct casting (Kedia et al. "
                           "Table 12)."),
    ("fold", fold_command, "Fold a trained run's residual scales into its weights and export it to Hugging Face."),
    ("experiment", experiment_command, "The papers' training experiments: grids of runs, fates, a table, a figure."),
    ("env", env_command, "The versions, threads and devices sigprop will use."),
    ("doctor", doctor_command, "Is this model stable at its depth, why, and the fix with its profile (--html)."),
)
for name, command, summary in COMMANDS:
    app.command(name, short_help=summary)(command)
app.add_typer(train_app, name="train", short_help="Train a model into a run directory; exact resume; several "
              "processes with torchrun; signal propagation tracked while it trains.")
app.add_typer(track_app, name="track", short_help="Draw a monitored run's statistics over layers and steps "
              "(sigprop.Monitor, the Trainer and Lightning callbacks, `sigprop train --track-every`).")

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # sigprop/: its warnings become notes
_show_warning = warnings.showwarning

#: What counts as bad input: a value out of range, a combination that does not apply, a missing, unreadable or
#: unwritable file, a number that overflows, a device that failed or is missing.
INPUT_ERRORS = (ValueError, NotImplementedError, OSError, OverflowError, DeviceError)


def _terminate(signum, frame):
    raise Terminated


def _note_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """sigprop's own warnings (what a mapping leaves out, ...) as ``note:`` lines; any other library's as Python
    prints them."""
    if filename.startswith(_PACKAGE):
        note(str(message))
    else:
        _show_warning(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> None:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``) and exit with its status (module docstring)."""
    previous, shown = signal.signal(signal.SIGTERM, _terminate), warnings.showwarning
    warnings.showwarning = _note_warning
    try:
        code = app(args=argv, prog_name="sigprop", standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool) and code:  # typer returns an Exit's status
            if code == 130:  # its form of Ctrl-C
                error("interrupted")
            sys.exit(code)
    except KeyboardInterrupt:
        error("interrupted")
        sys.exit(130)
    except Terminated:
        error("terminated")
        sys.exit(143)
    except TrainingDiverged as err:  # not bad input: the run itself failed, its last good checkpoint kept
        error(str(err))
        sys.exit(3)
    except INPUT_ERRORS as err:
        if os.environ.get("SIGPROP_TRACEBACK"):
            raise
        error(str(err) or type(err).__name__)
        sys.exit(2)
    except MemoryError as err:  # sizes no memory holds (numpy's allocation error is one): ask for less
        if os.environ.get("SIGPROP_TRACEBACK"):
            raise
        error(f"out of memory: {str(err) or type(err).__name__}; ask for smaller sizes")
        sys.exit(2)
    except Exception as err:  # the option parser's (click's) exceptions, recognised by name across its versions
        name, code = type(err).__name__, getattr(err, "exit_code", None)
        if name == "Abort":  # click's form of Ctrl-C
            error("interrupted")
            sys.exit(130)
        if name == "Exit" and code is not None:  # typer.Exit / click's Exit: a command's own status
            sys.exit(code)
        if code is None or not hasattr(err, "format_message"):
            raise
        if name == "NoArgsIsHelpError":  # `sigprop` alone: the help, already printed
            sys.exit(0)
        error(err.format_message())  # a usage error
        sys.exit(code)
    finally:
        signal.signal(signal.SIGTERM, previous)
        warnings.showwarning = shown
    sys.exit(0)
