"""Kill a real training process mid-run; the re-run must match an uninterrupted one bit for bit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from array_data import FULL_STATE_RUN, TINY_CLUSTER, TINY_MODEL, child_pythonpath

HERE = Path(__file__).parent

CONFIG = {
    "experiment": "resume",
    "seed": 0,
    "data": {"dataset": "array", "source": "local", "seq_len_tokens": 12},
    "model": TINY_MODEL,
    "cluster": TINY_CLUSTER,
    "train": {
        "max_rounds": 7,
        "inner_steps": 2,
        "inner_lr": 0.01,
        "warmup_fraction": 0.1,
        "max_tokens": 20000,
        "eval_sequences": 8,
        "eval_batch": 8,
    },
    "runs": {"r": FULL_STATE_RUN},
}


def launch(config: Path, ckpt: Path, out: Path) -> subprocess.Popen:
    # One thread each (as test_kills): the tiny model gains nothing from more, and the
    # uninterrupted run and the one killed share the cores.
    env = {**os.environ, "PYTHONPATH": child_pythonpath(), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, str(HERE / "resume_worker.py"), str(config), str(ckpt), str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def rows_without_wall_time(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        r.pop("wall_time_s")
    return rows


@pytest.mark.kill_resume
@pytest.mark.reliability("kills")
@pytest.mark.parametrize("slot_execution", ["sequential", "vectorized"])
def test_killed_run_resumes_bit_identically(tmp_path, slot_execution):
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({**CONFIG, "train": {**CONFIG["train"], "slot_execution": slot_execution}})
    )

    # The uninterrupted run beside the one that is killed: neither reads the other's files.
    straight = launch(config, tmp_path / "straight", tmp_path / "straight.pt")
    ckpt = tmp_path / "killed"
    victim = launch(config, ckpt, tmp_path / "killed.pt")
    metrics = ckpt / "metrics.jsonl"
    deadline = time.time() + 240
    # Kill once at least two rounds are checkpointed and the run is mid-way.
    while time.time() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 5:
            break
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert not (tmp_path / "killed.pt").exists(), "the run finished before it could be killed"
    rounds_done = len(rows_without_wall_time(metrics))
    assert straight.wait(timeout=300) == 0, straight.stdout.read().decode()

    resumed = launch(config, ckpt, tmp_path / "killed.pt")
    out = resumed.wait(timeout=300)
    log = resumed.stdout.read().decode()
    assert out == 0, log
    assert "resuming" in log
    assert rows_without_wall_time(metrics) == rows_without_wall_time(
        tmp_path / "straight" / "metrics.jsonl"
    )
    assert rounds_done < len(rows_without_wall_time(metrics))

    a = torch.load(tmp_path / "straight.pt", weights_only=True)
    b = torch.load(tmp_path / "killed.pt", weights_only=True)
    assert a.keys() == b.keys()
    for k in a:
        for p, q in zip(a[k], b[k], strict=True):
            assert torch.equal(p, q)
    rows = rows_without_wall_time(metrics)
    events = {e["type"] for r in rows for e in r["events"]}
    assert "merge" in events  # the state that resumed really included merges
