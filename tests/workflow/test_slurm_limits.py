"""adloco_workflow.slurm without a cluster: SLURM's clients replaced by scripts.

The status command follows the cluster's accounting; a partition's limits are
read from ``sinfo``'s node lines; a job larger than every node, or longer than
the time limit, is named with SLURM's reason. tests/workflow/test_slurm_real.py
runs the same code against a real SLURM.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from adloco_workflow import slurm


def fake_clients(tmp_path: Path, **outputs: str) -> dict[str, str]:
    """A PATH whose ``scontrol``, ``sinfo``, ``sacct`` print the given text."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in outputs.items():
        script = bin_dir / name
        (tmp_path / f"{name}.out").write_text(text)
        script.write_text(f"#!/bin/sh\ncat '{tmp_path / f'{name}.out'}'\n")
        script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}/bin:/usr/bin"}


@pytest.mark.parametrize(
    ("limit", "minutes"),
    [
        ("infinite", math.inf),
        ("UNLIMITED", math.inf),
        ("30", 30.0),
        ("2:00:00", 120.0),
        ("02:00:00", 120.0),
        ("1:30", 1.5),  # MM:SS
        ("1-00:00:00", 1440.0),
        ("2-12:30:00", 2 * 1440 + 12 * 60 + 30),
    ],
)
def test_time_limits_in_minutes(limit, minutes):
    assert slurm.minutes(limit) == minutes


def test_status_from_squeue_without_accounting_and_from_sacct_with_it(tmp_path, monkeypatch):
    off = "AccountingStorageType   = accounting_storage/none\nClusterName = ci\n"
    env = fake_clients(tmp_path, scontrol=off, sacct="")
    monkeypatch.setenv("PATH", env["PATH"])
    assert slurm.status_command(env) == "squeue"
    on = tmp_path / "scontrol.out"
    on.write_text("AccountingStorageType   = accounting_storage/slurmdbd\n")
    assert slurm.status_command(env) == "sacct"
    # No cluster answering (scontrol fails): squeue, which needs no database.
    (tmp_path / "bin/scontrol").write_text("#!/bin/sh\nexit 1\n")
    assert slurm.status_command(env) == "squeue"


SINFO = "debug*|2|20489|infinite\nbig|16|256000|2-00:00:00\nbig|32|512000+|2-00:00:00\n"


def test_partition_limits_are_its_largest_node_and_its_time_limit(tmp_path, monkeypatch):
    env = fake_clients(tmp_path, sinfo=SINFO)
    monkeypatch.setenv("PATH", env["PATH"])
    default = slurm.partition_limits(None, env)
    assert default == slurm.PartitionLimits("debug", 2, 20489, math.inf)
    big = slurm.partition_limits("big", env)
    assert big == slurm.PartitionLimits("big", 32, 512000, 2880.0)
    assert slurm.partition_limits("none", env) is None


def test_a_job_larger_than_every_node_is_named_with_slurms_reason():
    node = slurm.PartitionLimits("debug", 2, 20489, 60.0)
    assert slurm.unschedulable("train", 2, 20489, 60, node) is None  # exactly fits
    why = slurm.unschedulable("train", 8, 32000, 2880, node)
    assert why.startswith("rule train asks partition debug for 8 CPUs (its largest node has 2)")
    assert "32000 MB of memory (its largest node has 20489)" in why
    assert "2880 minutes (its time limit is 60)" in why
    assert "Reason=PartitionConfig" in why and "SBATCH_PARTITION" in why
    assert slurm.unschedulable("variance", 1, 20490, 1, node).count("MB of memory") == 1


def test_without_a_cluster_there_is_nothing_to_check(tmp_path, monkeypatch):
    env = {**os.environ, "PATH": str(tmp_path)}  # no SLURM clients at all
    monkeypatch.setenv("PATH", str(tmp_path))
    assert slurm.partition_limits(None, env) is None
    assert slurm.status_command(env) == "squeue"
