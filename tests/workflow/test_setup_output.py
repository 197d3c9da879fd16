"""`make setup` says what it installs and lets pip show its progress (issue 47, item 1).

A busy machine or a slow index makes set-up take many minutes; a quiet pip
(`-q`) left a user unable to tell work from a hang. These tests read the
commands `make setup` would run and run `scripts/install-torch.sh` against a
stand-in Python that records what it was asked to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_setup_names_each_step_and_never_quiets_pip():
    commands = subprocess.run(
        ["make", "-n", "-B", "setup", "VENV=/nonexistent"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    steps = [c for c in commands if c.startswith('echo "setup')]
    assert [s.split(":")[0] for s in steps] == [
        'echo "setup 1/4', 'echo "setup 2/4', 'echo "setup 3/4', 'echo "setup 4/4', 'echo "setup'
    ]  # fmt: skip
    assert (
        "transformers, snakemake" in steps[2] and "packages pinned by requirements.lock" in steps[2]
    )
    pip = [c for c in commands if " pip install " in c]
    assert pip and all(" -q" not in c and "--progress-bar on" in c for c in pip), pip


def fake_python(folder: Path, pip_succeeds: bool) -> tuple[Path, Path]:
    """A stand-in PYTHON: torch never imports; each `-m pip` call's arguments go to a file."""
    calls = folder / "calls.txt"
    script = folder / "python"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "-c" ]; then exit 1; fi
        echo "$@" >> {calls}
        echo "pip (stand-in): Collecting torch"
        exit {0 if pip_succeeds else 1}
        """))  # fmt: skip
    script.chmod(0o755)
    return script, calls


@pytest.mark.parametrize("on_index", [True, False], ids=["cpu wheel found", "pytorch index"])
def test_install_torch_says_which_build_and_shows_pips_progress(tmp_path, on_index):
    python, calls = fake_python(tmp_path, pip_succeeds=on_index)
    # No nvidia-smi on PATH: the CPU build.
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        ["sh", str(ROOT / "scripts/install-torch.sh"), str(python), "9.9.9"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    out = result.stdout.splitlines()
    assert out[0] == (
        "no GPU: installing the CPU build of torch==9.9.9 "
        "(about 200 MB to download, about 700 MB unpacked)"
    )
    assert "pip (stand-in): Collecting torch" in out  # pip's own lines reach the user
    asked = calls.read_text().splitlines()
    assert all("--progress-bar on" in a and " -q" not in a for a in asked), asked
    assert "torch==9.9.9+cpu" in asked[0]
    if on_index:
        assert result.returncode == 0 and len(asked) == 1
    else:
        # Not on the configured index: it says where it looks next, and pip's failure there
        # is the script's.
        assert "trying the PyTorch CPU index (https://download.pytorch.org/whl/cpu)" in out[-2]
        assert len(asked) == 2 and "--index-url https://download.pytorch.org/whl/cpu" in asked[1]
        assert result.returncode == 1
