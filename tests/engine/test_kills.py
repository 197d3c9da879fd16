"""kill -9 at every moment of a round, then the same run again: bit-identical results.

``kill_worker.py`` trains the tiny run once uninterrupted and then, for each
moment below, in a fresh process that SIGKILLs itself there, followed by a
fresh process that resumes from whatever the kill left on disk: mid-round,
between the metrics rows and the checkpoint, part-way through a checkpoint
file, between the files and the manifest, between the manifest and the
removal of older rounds. Every resumed run must end with the uninterrupted
run's metrics rows (all fields but wall time) and weights, bit for bit.
Moments in round 2 come before the first merge, in round 4 after it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from array_data import child_pythonpath
from kill_worker import POINTS
from test_resume import CONFIG as RESUME

HERE = Path(__file__).parent
MOMENTS = [f"{point}@{round_}" for round_ in (2, 4) for point in POINTS]
# test_resume's run (several trainers, merges, every piece of state), five rounds.
CONFIG = {**RESUME, "experiment": "kills", "train": {**RESUME["train"], "max_rounds": 5}}


@pytest.fixture(scope="module")
def kills(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("kills")
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    env = {**os.environ, "PYTHONPATH": child_pythonpath(), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(HERE / "kill_worker.py"), str(config), str(root), *MOMENTS],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.kill_resume
@pytest.mark.reliability("kills")
@pytest.mark.parametrize("moment", MOMENTS)
def test_a_run_killed_at_any_moment_resumes_bit_identically(kills, moment):
    point, round_ = moment.split("@")
    # It resumed (not started over) from the last round the manifest named.
    last_complete = int(round_) if point == "after-manifest" else int(round_) - 1
    assert kills[moment] == {
        "killed": True,
        "resumed_after_round": last_complete,
        "identical": True,
    }
