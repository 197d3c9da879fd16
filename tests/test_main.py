"""``python -m adloco`` (src/adloco/__main__.py): the CLI's exit status becomes the process's."""

from __future__ import annotations

import subprocess
import sys

from adloco import __version__


def module(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "adloco", *args], capture_output=True, text=True, timeout=60
    )


def test_version_exits_0_and_prints_it():
    done = module("--version")
    assert done.returncode == 0
    assert done.stdout.split() == ["adloco", __version__]


def test_an_unknown_stage_exits_2_naming_the_stages():
    done = module("nonsense")
    assert done.returncode == 2
    assert "invalid choice: 'nonsense'" in done.stderr and "'train'" in done.stderr
