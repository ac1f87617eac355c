"""Files written through a temporary file and a rename get a plain file's permissions, not mkstemp's 0o600."""

from __future__ import annotations

import os
import stat

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from sigprop.core.figures import save_figure  # noqa: E402
from sigprop.core.jsonio import write_json_atomic  # noqa: E402
from sigprop.core.outputs import plain_mode  # noqa: E402


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_atomic_writes_leave_the_umask_s_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        png = save_figure(fig, tmp_path / "f.png")
        js = write_json_atomic(tmp_path / "f.json", {"a": 1})
        folder = tmp_path / "d"
        folder.mkdir(mode=0o700)
        plain_mode(folder, folder=True)
    finally:
        os.umask(old)
    assert _mode(png) == _mode(js) == 0o644
    assert _mode(folder) == 0o755
