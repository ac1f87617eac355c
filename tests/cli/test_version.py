"""``sigprop --version``: one line naming the version that ``sigprop.__version__`` and the wheel's metadata carry."""

import re
import subprocess
import sys

import sigprop
from tests.helpers import run_cli


def test_version_prints_the_package_version_and_exits_zero():
    result = run_cli(["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"sigprop {sigprop.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+", sigprop.__version__)


def test_version_comes_before_any_command_and_runs_none():
    result = run_cli(["--version", "predict", "--preset", "no-such-preset"])
    assert result.exit_code == 0 and result.output == f"sigprop {sigprop.__version__}\n"


def test_version_from_a_fresh_process():
    out = subprocess.run([sys.executable, "-m", "sigprop", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"sigprop {sigprop.__version__}\n"
