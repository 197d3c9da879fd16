"""The SLURM profile where SLURM's programs are missing, or stand-ins answer for them.

Without ``sbatch`` the executor plugin guessed an account, failed to submit
and waited for ever at 0 % CPU; SIGTERM then only announced that Snakemake
would wait for the running jobs. Now the Snakefile's ``onstart`` refuses in one
line before any job (adloco_workflow.slurm.check_clients), and SIGTERM and
SIGINT (Ctrl-C) end Snakemake where they land, cancelling what it submitted
(``scancel``; adloco_workflow.slurm.stop_on_signals).
Each run has a subprocess timeout, so a hang fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_pipeline_wiring import make_copy
from test_snakemake import SNAKEMAKE

from adloco_workflow import slurm

pytestmark = pytest.mark.workflow_cli

BIN = Path(sys.executable).parent
SYSTEM_PATH = "/usr/bin:/bin"
# SLURM's own programs: a machine that has SLURM installed (make test-slurm installs it)
# keeps them in /usr/bin, so the tests see the system's programs without these.
SLURM_PROGRAMS = ("sbatch", "sinfo", "scontrol", "squeue", "sacct", "scancel", "srun", "salloc")


def system_path(tmp_path: Path) -> str:
    """SYSTEM_PATH's programs, linked into one folder, without SLURM's."""
    folder = tmp_path / "system-bin"
    folder.mkdir()
    for directory in SYSTEM_PATH.split(":"):
        for program in Path(directory).iterdir():
            link = folder / program.name
            if program.name not in SLURM_PROGRAMS and not link.exists():
                link.symlink_to(program)
    return str(folder)


TARGET = "data/raw/test-tiny"  # one job: the corpus
PROFILE = ["--workflow-profile", "profiles/slurm", "--configfile", "config/test.yaml"]


def test_missing_clients_names_each_choice(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {"PATH": str(bin_dir)}
    assert slurm.missing_clients(env) == ["sbatch", "(sinfo or scontrol)", "(squeue or sacct)"]
    for name in ("sbatch", "scontrol", "squeue"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    assert slurm.missing_clients(env) == []
    assert slurm.clients_problem(env) is None
    (bin_dir / "sbatch").unlink()
    problem = slurm.clients_problem(env)
    assert problem.startswith("snakemake: error: the SLURM profile (profiles/slurm) needs sbatch ")
    assert "\n" not in problem


@pytest.mark.reliability("workflow")
def test_the_slurm_profile_without_slurm_stops_in_one_line_before_any_job(tmp_path):
    work, env = make_copy(tmp_path)
    env["PATH"] = f"{tmp_path / 'bin'}:{BIN}:{system_path(tmp_path)}"
    env.pop("SBATCH_ACCOUNT", None)
    assert all(slurm.shutil.which(n, path=env["PATH"]) is None for n in ("sbatch", "sinfo"))
    # A dry run still plans the jobs, saying they cannot be submitted from here.
    dry = subprocess.run(
        [SNAKEMAKE, "-n", *PROFILE],
        cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stdout + dry.stderr
    warnings = [line for line in dry.stderr.splitlines() if line.startswith("snakemake: warning:")]
    assert warnings == [
        "snakemake: warning: no sbatch, (sinfo or scontrol) and (squeue or sacct) on PATH: the "
        "SLURM profile's jobs can be planned here (-n) but not submitted; a real run stops "
        "before any job"
    ]
    result = subprocess.run(
        [SNAKEMAKE, *PROFILE],
        cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    assert errors == [
        "snakemake: error: the SLURM profile (profiles/slurm) needs sbatch, (sinfo or scontrol) "
        "and (squeue or sacct) on PATH, which this machine lacks (no SLURM client here); run "
        "snakemake on the cluster's login node (or load its SLURM module), or run the jobs on "
        "this machine without --workflow-profile profiles/slurm"
    ], output
    assert "Traceback" not in output and "trying to guess" not in output
    assert not (tmp_path / "calls.jsonl").exists()  # no job ran, here or anywhere
    assert not (work / TARGET).exists() and not (work / "logs/slurm").exists()


def stand_in_slurm(tmp_path: Path) -> tuple[Path, Path]:
    """SLURM's clients as scripts: sbatch submits job 4242, squeue knows nothing yet
    (the job stays pending for Snakemake), scancel and every call are recorded."""
    bin_dir, calls = tmp_path / "slurm-bin", tmp_path / "slurm-calls"
    bin_dir.mkdir()
    answers = {"sbatch": "echo 4242", "sacctmgr": "echo acct"}
    for name in ("sbatch", "sinfo", "scontrol", "squeue", "scancel", "sacctmgr"):
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n{answers.get(name, "")}\n')
        script.chmod(0o755)
    return bin_dir, calls


def sigint_in_a_coroutine() -> str:
    """``asyncio.Runner.run`` of a coroutine that sends its process SIGINT and then
    finishes despite the cancellation asyncio makes of it (as one that catches it does)."""

    async def finishes_anyway() -> str:
        os.kill(os.getpid(), signal.SIGINT)
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "cancelled, and finished anyway"
        return "slept"

    with asyncio.Runner() as runner:
        return runner.run(finishes_anyway())


def on_executor(name: str) -> SimpleNamespace:
    """A workflow as ``onstart`` sees it, run by the executor plugin ``name``."""
    return SimpleNamespace(executor_plugin=SimpleNamespace(name=name))


@pytest.mark.reliability("workflow")
def test_under_slurm_a_sigint_in_a_coroutine_is_not_lost():
    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # Python's default: asyncio takes SIGINT over and it is lost with the cancellation.
        assert sigint_in_a_coroutine() == "cancelled, and finished anyway"
        slurm.stop_on_signals(on_executor("local"))  # another executor: nothing changes
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        assert sigint_in_a_coroutine() == "cancelled, and finished anyway"
        slurm.stop_on_signals(on_executor("slurm"))
        with pytest.raises(KeyboardInterrupt, match="signal 2"):
            sigint_in_a_coroutine()
        with pytest.raises(KeyboardInterrupt, match="signal 15"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)


@pytest.mark.reliability("workflow")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_slurm_run_and_cancels_its_job(tmp_path, signum):
    work, env = make_copy(tmp_path)
    slurm_bin, calls = stand_in_slurm(tmp_path)
    env["PATH"] = f"{slurm_bin}:{tmp_path / 'bin'}:{BIN}:{SYSTEM_PATH}"  # the stand-ins first
    env["SBATCH_ACCOUNT"] = "acct"
    process = subprocess.Popen(
        [SNAKEMAKE, TARGET, *PROFILE],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        # Signalled once Snakemake has recorded the submission (job 4242).
        for _ in range(1500):
            if any("submitted with SLURM jobid 4242" in line for line in lines):
                break
            if process.poll() is not None:
                break
            time.sleep(0.2)
        assert process.poll() is None, "".join(lines)
        process.send_signal(signum)
        # Snakemake's own SIGTERM handler waited for the job, for ever (the timeout fails).
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    reader.join(timeout=30)
    output = "".join(lines)
    assert process.returncode != 0, output
    assert "Will exit after finishing currently running jobs" not in output
    assert "Terminating processes on user request" in output
    assert "scancel 4242" in calls.read_text().splitlines(), output
