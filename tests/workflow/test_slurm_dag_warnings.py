"""What a user sees while Snakemake builds the DAG under the SLURM profile: no Python warning.

Under a non-local executor Snakemake gives every job its "full" default
resources, among them ``disk_mb = max(2*input.size_mb, 1000) if input else 50000``.
``input.size_mb`` runs a coroutine through ``async_run``, which refuses inside the
event loop that builds the DAG; Snakemake catches that and leaves the resource
``<TBD>``, but the coroutine was created and never awaited, and Python printed
``RuntimeWarning: coroutine 'InputFiles._predicated_size_files.<locals>.sizes'
was never awaited`` (Snakemake 9.27.1, snakemake/iocontainers.py and rules.py's
``expand_resources``). The plugin passes no disk request to SLURM, so the
profile sets ``disk_mb`` to a constant and the expression is never evaluated.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from test_snakemake import ROOT, SNAKEMAKE, parse_dry_run

pytestmark = pytest.mark.workflow_cli

PROFILE = ROOT / "profiles/slurm"
WARNING = "coroutine 'InputFiles._predicated_size_files.<locals>.sizes' was never awaited"
DISK_LINE = "  disk_mb: 1000\n"


def dry_run(profile: Path) -> tuple[str, list[dict]]:
    done = subprocess.run(
        [SNAKEMAKE, "-n", "--workflow-profile", str(profile), "--configfile", "config/test.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output, parse_dry_run(output)


def test_building_the_dag_under_the_slurm_profile_prints_no_warning():
    output, jobs = dry_run(PROFILE)
    assert "RuntimeWarning" not in output and "never awaited" not in output, output
    assert len(jobs) >= 5
    assert {job["resources"].get("disk_mb") for job in jobs} == {"1000"}


def test_without_the_profiles_disk_the_warning_comes_back(tmp_path):
    # The cause, shown: the same profile without its disk_mb line.
    profile = tmp_path / "slurm"
    shutil.copytree(PROFILE, profile)
    config = profile / "config.yaml"
    text = config.read_text()
    assert text.count(DISK_LINE) == 1
    config.write_text(text.replace(DISK_LINE, ""))
    output, jobs = dry_run(profile)
    assert WARNING in output
    # Jobs with inputs: Snakemake could not evaluate the default while it built the DAG.
    assert "<TBD>" in {job["resources"].get("disk_mb") for job in jobs}
