"""The line a Snakemake user reads first agrees with the docs (issue 47, item 5).

Snakemake's own banner says config/config.yaml "is extended by" a
``--configfile``; the workflow reads that file alone (docs/workflow.md: it
*replaces* config/config.yaml), and says so in a line of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dry_run(work: Path, *args: str) -> str:
    snakemake = Path(sys.executable).with_name("snakemake")
    shutil.copytree(ROOT / "config", work / "config")
    result = subprocess.run(
        [str(snakemake), "-n", "-s", str(ROOT / "Snakefile"), "--directory", str(work), *args],
        cwd=work, capture_output=True, text=True, check=True, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    return result.stdout + result.stderr


@pytest.mark.workflow_cli
@pytest.mark.parametrize(
    "args, rules",
    [(("--configfile", "config/test.yaml"), "config/test.yaml"), ((), "config/config.yaml")],
    ids=["--configfile", "default"],
)
def test_the_workflow_says_which_one_file_every_job_reads(tmp_path, args, rules):
    text = dry_run(tmp_path, *args)
    said = [line for line in text.splitlines() if line.startswith("adloco: configuration")]
    assert said == [
        f"adloco: configuration {rules} alone: every job reads this file, not a merge with "
        "config/config.yaml (a --configfile replaces it)"
    ]
    # And it is true: the jobs' commands name that file alone.
    assert f"--config {rules}" in dry_run(tmp_path / "p", "-p", *args)
