"""A stale Snakemake lock is released only when no process can hold it (adloco_workflow).

The module is workflow/lib/adloco_workflow/snakemake_lock.py, a helper of the workflow.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adloco_workflow import snakemake_lock as sl

# The folder of the workflow's helpers, for a Python started here.
LIB = str(Path(__file__).resolve().parents[1] / "workflow" / "lib")

pytestmark = pytest.mark.skipif(not sl.can_inspect(), reason="needs /proc")


def make_lock(workdir: Path) -> Path:
    locks = workdir / ".snakemake" / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    lock = locks / "0.output.lock"
    lock.write_text(str(workdir / "results/report/index.html") + "\n")
    return lock


def start_in(workdir: Path, name: str, tmp_path: Path) -> subprocess.Popen:
    """A sleeping program called ``name`` (say snakemake) whose working directory is ``workdir``."""
    program = tmp_path / "bin" / name
    program.parent.mkdir(exist_ok=True)
    # One process that sleeps itself: a shell's forked child not yet exec-ed carries the
    # same argv and working directory, and could outlive the kill as a second "snakemake".
    program.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    program.chmod(0o755)
    proc = subprocess.Popen([str(program), "--cores", "all"], cwd=workdir)
    # Wait until the kernel shows the new command line.
    deadline = time.time() + 10
    while time.time() < deadline and not (sl._read_argv(proc.pid) or [""])[-1] == "all":
        time.sleep(0.02)
    return proc


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/work/.venv/bin/python", "/work/.venv/bin/snakemake", "--cores", "all"], True),
        (["python", "-m", "snakemake", "-n"], True),
        (["/bin/bash", "-c", "set -euo pipefail;  adloco train --config c.yaml"], True),
        (["torchrun", "--standalone", "--no-python", "adloco", "train"], True),
        (["vim", "src/adloco/core/io.py"], False),
        (["python", "-m", "pytest", "tests/test_snakemake_lock.py"], False),
        (["bash"], False),
    ],
)
def test_which_commands_count_as_the_workflow(argv, expected):
    assert sl.is_workflow_command(argv) is expected


def test_a_lock_nobody_holds_is_released(tmp_path):
    lock = make_lock(tmp_path)
    released, message = sl.release_stale_lock(tmp_path)
    assert released and not lock.exists()
    assert "removed the lock a killed Snakemake left" in message


def test_no_lock_no_message(tmp_path):
    assert sl.release_stale_lock(tmp_path) == (False, "")


def test_a_live_snakemake_in_the_directory_keeps_the_lock(tmp_path):
    lock = make_lock(tmp_path)
    proc = start_in(tmp_path, "snakemake", tmp_path)
    try:
        released, message = sl.release_stale_lock(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    assert not released and lock.exists()
    assert f"process {proc.pid}" in message and "--unlock" in message
    # Once it is gone, the lock is stale.
    assert sl.release_stale_lock(tmp_path)[0]


def test_an_adloco_job_that_outlived_its_snakemake_keeps_the_lock(tmp_path):
    lock = make_lock(tmp_path)
    proc = start_in(tmp_path, "adloco", tmp_path)
    try:
        assert not sl.release_stale_lock(tmp_path)[0] and lock.exists()
    finally:
        proc.kill()
        proc.wait()


def test_a_snakemake_in_another_directory_does_not_count(tmp_path):
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    make_lock(tmp_path / "here")
    proc = start_in(tmp_path / "elsewhere", "snakemake", tmp_path)
    try:
        assert sl.release_stale_lock(tmp_path / "here")[0]
    finally:
        proc.kill()
        proc.wait()


def test_the_processes_that_started_this_one_do_not_count(tmp_path):
    # A Snakemake started by `make run` (or a shell script called snakemake)
    # must not see its own launcher as another Snakemake.
    make_lock(tmp_path)
    code = (
        f"import sys; sys.path.insert(0, {LIB!r}); "
        "from adloco_workflow import snakemake_lock as sl; "
        "print(sl.release_stale_lock(sys.argv[1])[0])"
    )
    launcher = tmp_path / "bin" / "snakemake"
    launcher.parent.mkdir()
    launcher.write_text(f'#!/bin/sh\n"{sys.executable}" -c "{code}" "$@"\n')
    launcher.chmod(0o755)
    result = subprocess.run(
        [str(launcher), str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "True", result.stderr


def test_a_record_of_another_host_keeps_the_lock_until_unlock(tmp_path):
    lock = make_lock(tmp_path)
    owners = tmp_path / sl.OWNERS
    owners.mkdir(parents=True)
    record = {"host": "login-2", "pid": 4242, "start_time": "1", "command": "snakemake"}
    (owners / "login-2.4242.json").write_text(json.dumps(record))
    released, message = sl.release_stale_lock(tmp_path)
    assert not released and lock.exists()
    assert "process 4242 on host login-2" in message
    # `snakemake --unlock` clears the records (and Snakemake removes the lock);
    # a lock a later kill leaves is then stale again.
    assert sl.release_stale_lock(tmp_path, clear_records=True)[0]
    assert not list(owners.iterdir()) and not lock.exists()
    make_lock(tmp_path)
    assert sl.release_stale_lock(tmp_path)[0]


def test_a_record_of_a_dead_process_on_this_host_is_dropped(tmp_path):
    make_lock(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    owners = tmp_path / sl.OWNERS
    owners.mkdir(parents=True)
    host = socket.gethostname()
    record = {"host": host, "pid": proc.pid, "start_time": "123", "command": "snakemake"}
    (owners / f"{host}.{proc.pid}.json").write_text(json.dumps(record))
    assert sl.release_stale_lock(tmp_path)[0]
    assert not list(owners.iterdir())


def test_register_records_this_process_until_it_exits(tmp_path):
    code = (
        f"import sys; sys.path.insert(0, {LIB!r}); "
        "from adloco_workflow import snakemake_lock as sl; "
        "p = sl.register(sys.argv[1]); print(p); print(p.exists())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    path, existed = result.stdout.split()
    assert existed == "True" and not os.path.exists(path)
