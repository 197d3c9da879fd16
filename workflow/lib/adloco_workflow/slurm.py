"""What the SLURM profile asks of the cluster it finds.

Read by ``profiles/slurm/config.yaml`` (through YTE, before Snakemake
builds its jobs), with Snakemake's own dependencies only:

* :func:`status_command`: where the executor plugin reads job states. It polls
  ``sacct`` whenever the program exists, but on a cluster whose accounting is
  off (``AccountingStorageType=accounting_storage/none``) ``sacct`` answers
  nothing and Snakemake waits after the first job, silently. There the states
  come from ``squeue``, which shows a finished job for ``MinJobAge`` seconds.
* :func:`partition_limits` and :func:`unschedulable`: the largest node of the
  partition jobs go to and its time limit, so that a job SLURM would leave
  pending for ever (``Reason=PartitionConfig``, ``Resources`` on a node too small)
  is refused before anything is submitted, in one line with SLURM's reason.
* :func:`missing_clients`, :func:`check_clients` and :func:`warn_without_clients`:
  the SLURM programs the profile cannot work without (``sbatch`` to submit,
  ``sinfo`` or ``scontrol`` to read the cluster, ``squeue`` or ``sacct`` for job
  states). Without them the executor plugin guessed an account, failed to
  submit and waited for ever at 0 % CPU; the Snakefile's ``onstart`` now
  refuses in one line before any job, and a dry run says it cannot be submitted
  from here.
* :func:`stop_on_signals`: SIGTERM and SIGINT (Ctrl-C) end Snakemake at once,
  cancelling the jobs it submitted (``scancel``), where Snakemake's own SIGTERM
  handler would wait for every submitted job to finish and asyncio could lose
  a SIGINT.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

NO_ACCOUNTING = "accounting_storage/none"
TIMEOUT_S = 30
PROFILE = "profiles/slurm"
# What the profile needs, each a choice of programs: submitting, reading the
# cluster (limits, accounting), polling job states.
CLIENTS = (("sbatch",), ("sinfo", "scontrol"), ("squeue", "sacct"))


def _run(args: list[str], environ: Mapping[str, str] | None = None) -> str | None:
    """A SLURM client's output, or None where it is missing or fails."""
    if shutil.which(args[0]) is None:
        return None
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=TIMEOUT_S, env=dict(environ or os.environ)
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def scontrol_config(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``scontrol show config`` as a mapping (empty where there is no cluster)."""
    out = _run(["scontrol", "show", "config"], environ) or ""
    pairs = (line.split(" = ", 1) for line in out.splitlines() if " = " in line)
    return {key.strip(): value.strip() for key, value in pairs}


def status_command(environ: Mapping[str, str] | None = None) -> str:
    """``sacct`` on a cluster that keeps accounting, ``squeue`` on one that does not."""
    storage = scontrol_config(environ).get("AccountingStorageType", "")
    if shutil.which("sacct") is None or storage in ("", NO_ACCOUNTING):
        return "squeue"
    return "sacct"


@dataclass(frozen=True)
class PartitionLimits:
    """The most one job may ask of a partition: its largest node, and its time limit."""

    name: str
    cpus: int
    memory_mb: int
    max_time_min: float  # inf: no limit


def minutes(limit: str) -> float:
    """SLURM's time limit (``infinite``, ``MM``, ``HH:MM:SS``, ``D-HH:MM:SS``) in minutes."""
    if limit in ("infinite", "UNLIMITED", "n/a", ""):
        return float("inf")
    days, _, clock = limit.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if len(parts) == 1:  # MM
        seconds = parts[0] * 60
    else:
        while len(parts) < 3:
            parts.insert(0, 0.0)
        seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return (float(days) * 1440 if days else 0.0) + seconds / 60


def partition_limits(
    partition: str | None = None, environ: Mapping[str, str] | None = None
) -> PartitionLimits | None:
    """The limits of ``partition`` (the default partition when None), from ``sinfo``."""
    out = _run(["sinfo", "-h", "-N", "-o", "%P|%c|%m|%l"], environ)
    if not out:
        return None
    rows = [line.split("|") for line in out.splitlines() if line.count("|") == 3]
    if partition:
        rows = [r for r in rows if r[0].rstrip("*") == partition]
    else:
        rows = [r for r in rows if r[0].endswith("*")]
    if not rows:
        return None
    return PartitionLimits(
        name=rows[0][0].rstrip("*"),
        cpus=max(int(r[1].rstrip("+")) for r in rows),
        memory_mb=max(int(r[2].rstrip("+")) for r in rows),
        max_time_min=max(minutes(r[3]) for r in rows),
    )


def unschedulable(
    rule: str, cpus: int, memory_mb: int, runtime_min: float, limits: PartitionLimits
) -> str | None:
    """Why SLURM would never start this job on the partition, or None if it fits."""
    asks = []
    if cpus > limits.cpus:
        asks.append(f"{cpus} CPUs (its largest node has {limits.cpus})")
    if memory_mb > limits.memory_mb:
        asks.append(f"{memory_mb} MB of memory (its largest node has {limits.memory_mb})")
    if runtime_min > limits.max_time_min:
        asks.append(f"{runtime_min:g} minutes (its time limit is {limits.max_time_min:g})")
    if not asks:
        return None
    return (
        f"rule {rule} asks partition {limits.name} for {' and '.join(asks)}: SLURM would leave "
        "the job pending for ever (Reason=PartitionConfig); lower the preset's resources or "
        "choose another partition with SBATCH_PARTITION"
    )


def check_jobs_fit(workflow, environ: Mapping[str, str] | None = None) -> None:
    """Refuse, before the first ``sbatch``, a job no node of its partition can ever run.

    Called from the Snakefile's ``onstart`` (after the DAG is built, never in a
    dry run); does nothing under another executor or where ``sinfo`` answers
    nothing (no cluster to ask).
    """
    if not _is_slurm(workflow):
        return
    from snakemake.exceptions import WorkflowError

    limits: dict[str | None, PartitionLimits | None] = {}
    for job in workflow.dag.needrun_jobs():
        if job.is_local:
            continue
        resources = job.resources
        partition = resources.get("slurm_partition") or None
        if partition not in limits:
            limits[partition] = partition_limits(partition, environ)
        if limits[partition] is None:
            continue
        why = unschedulable(
            job.rule.name,
            int(resources.get("cpus_per_task") or job.threads),
            int(resources.get("mem_mb") or 0),
            float(resources.get("runtime") or 0),
            limits[partition],
        )
        if why:
            raise WorkflowError(why)


def missing_clients(environ: Mapping[str, str] | None = None) -> list[str]:
    """The SLURM programs (``a or b`` where either will do) not on ``environ``'s PATH."""
    path = (environ if environ is not None else os.environ).get("PATH", "")
    return [
        " or ".join(choice) if len(choice) == 1 else f"({' or '.join(choice)})"
        for choice in CLIENTS
        if all(shutil.which(name, path=path) is None for name in choice)
    ]


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def clients_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """The one line refusing the profile on a machine without SLURM's programs, or None."""
    missing = missing_clients(environ)
    if not missing:
        return None
    return (
        f"snakemake: error: the SLURM profile ({PROFILE}) needs {_listed(missing)} on PATH, "
        "which this machine lacks (no SLURM client here); run snakemake on the "
        "cluster's login node (or load its SLURM module), or run the jobs on this machine "
        "without --workflow-profile profiles/slurm"
    )


def _is_slurm(workflow) -> bool:
    plugin = getattr(workflow, "executor_plugin", None)
    return plugin is not None and plugin.name.rsplit("-", 1)[-1] == "slurm"


def check_clients(workflow, environ: Mapping[str, str] | None = None) -> None:
    """Refuse, in the Snakefile's ``onstart`` (before the first ``sbatch``), a SLURM run
    on a machine without SLURM's programs; nothing under another executor."""
    if not _is_slurm(workflow):
        return
    problem = clients_problem(environ)
    if problem is not None:
        raise SystemExit(problem)


def warn_without_clients(environ: Mapping[str, str] | None = None) -> None:
    """One warning line where the profile is read on a machine without SLURM's programs:
    a dry run still plans the jobs (to read them here), a real run is refused."""
    missing = missing_clients(environ)
    if missing:
        print(
            f"snakemake: warning: no {_listed(missing)} on PATH: the SLURM profile's jobs "
            "can be planned here (-n) but not submitted; a real run stops before any job",
            file=sys.stderr,
        )


def stop_on_signals(workflow) -> None:
    """Under the SLURM executor, SIGTERM and SIGINT raise ``KeyboardInterrupt`` where they land.

    ``KeyboardInterrupt`` makes Snakemake's scheduler cancel the submitted jobs
    (the plugin's ``scancel``) and return. Snakemake's own SIGTERM handler
    instead waits for every running job to finish, which on a cluster is hours.
    SIGINT, left to Python's default, is taken over by asyncio while Snakemake
    runs one of its coroutines: ``asyncio.Runner`` turns it into a cancellation
    of the coroutine's task, which is lost where the coroutine finishes anyway
    (one that catches it; Python 3.11's ``TaskGroup`` where an outside
    cancellation meets one of its own, CPython gh-116720), and the run then
    waits for its pending jobs for ever. A handler of our own keeps asyncio's
    off: it installs its handler only over Python's default one.
    Set in ``onstart``, after Snakemake has installed its handler.
    """
    if not _is_slurm(workflow):
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, interrupt)
