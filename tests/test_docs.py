"""The docs against the code: documented commands run (DESIGN.md: tests/test_design.py)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src/adloco"


@pytest.mark.workflow_cli
def test_training_one_run_and_seed_is_documented_and_plans_that_job_alone():
    # The command of docs/workflow.md's block, also in the README's usage: a dry run of it
    # plans the training of that run, what it needs, and nothing else (a job per seed:
    # tests/workflow/test_snakemake.py).
    block = (ROOT / "docs/workflow.md").read_text().split("## Snakemake on one machine", 1)[1]
    (line,) = [x for x in block.splitlines() if x.startswith("snakemake --cores all results/")]
    command = shlex.split(line.split("#", 1)[0])
    target = command[-1]
    assert target == "results/default/runs/adloco/seed3/summary.json"
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"`{' '.join(command)}`" in readme
    snakemake = str(Path(sys.executable).parent / "snakemake")
    result = subprocess.run(
        [snakemake, "-n", "--forceall", *command[1:]],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    rules = re.findall(r"^(?:local)?rule (\S+):$", out, flags=re.M)
    # config/config.yaml has a job per run (snakemake.train_jobs: run): the
    # run's job, which writes seed 3's folder with the others.
    before = ["prepare_corpus", "tokenize", "pretrain", "calibrate"]
    assert sorted(rules) == sorted([*before, "train_adloco"])
    assert re.search(r"^    output: .*results/default/runs/adloco/seed3/summary\.json", out, re.M)
