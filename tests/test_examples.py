"""examples/train_diloco_adloco.py runs as written and computes what the stages compute.

It calls the library's functions in the pipeline's order, without Snakemake or
the ``adloco`` command; on a CPU whose MKL branch has a committed fingerprint
(tests/test_fingerprint.py), its base model and runs give the fingerprint's
numbers, which the stages computed, to the bit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_diloco_adloco.py"
FINGERPRINTS = ROOT / "tests" / "fixtures"


def test_the_example_is_one_short_script():
    assert sorted(p.name for p in (ROOT / "examples").iterdir() if p.suffix == ".py") == [
        EXAMPLE.name
    ]
    assert len(EXAMPLE.read_text().splitlines()) < 80
    # The library's entries, not the workflow's or the command line's.
    text = EXAMPLE.read_text()
    assert "from adloco.train_run import TrainRequest, train" in text
    assert "import subprocess" not in text and "adloco.cli" not in text


@pytest.mark.slow
def test_the_example_trains_diloco_and_adloco_as_the_stages_do(tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "ADLOCO_NUMERICS"}  # the default mode
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    printed = result.stdout.splitlines()
    summaries = {}
    for run in ("diloco", "adloco"):
        summary = json.loads((out / "runs" / run / "summary.json").read_text())
        assert summary["method"] == run and summary["rounds"] == 3
        line = f"{run}: validation perplexity {summary['final_val_perplexity']:.1f} after 3 rounds"
        assert any(p.startswith(line) for p in printed), printed
        summaries[run] = summary
    rows = {}
    for run in summaries:
        lines = (out / "runs" / run / "metrics.jsonl").read_text().splitlines()
        rows[run] = [json.loads(line) for line in lines]
    # DiLoCo trains one model; AdLoCo starts two and merges them after round 2.
    assert {r["trainer"] for r in rows["diloco"]} == {0}
    assert [r["active_trainers"] for r in rows["adloco"] if r["round"] == 1] == [2, 2]
    assert summaries["adloco"]["final_trainers"] == 1
    # Only the run folders and their inputs were written, all under OUT.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # The numbers the stages computed (scripts/fingerprint.py runs them as `adloco` commands).
    numerics = summaries["adloco"]["numerics"]
    assert numerics["mode"] == "fast" and numerics["pinned_before_torch"]
    committed = FINGERPRINTS / f"fingerprint-fast-{numerics['mkl_branch']}.json"
    if not committed.is_file():
        pytest.skip(f"no fingerprint of this CPU's MKL branch ({committed.name}) to compare with")
    preset = json.loads(committed.read_text())["test_preset"]
    base = json.loads((out / "base" / "base.json").read_text())
    assert base["val_perplexity"] == preset["base"]["val_perplexity"]
    for run, summary in summaries.items():
        expected = preset["runs"][run]["final_val_perplexity"]
        assert summary["final_val_perplexity"] == expected, run
