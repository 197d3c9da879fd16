"""Run a command in a fresh process under one numerics mode (for the mode tests)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from adloco.core import numerics

ROOT = Path(__file__).resolve().parents[1]


def run_in_mode(argv: list[str], mode: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``argv`` from the repository root with ``ADLOCO_NUMERICS=mode`` and none of the pinned
    variables inherited, so the child pins them itself; fails the test on a non-zero exit."""
    env = {k: v for k, v in os.environ.items() if k not in numerics.VARIABLES}
    env[numerics.MODE_VARIABLE] = mode
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done
