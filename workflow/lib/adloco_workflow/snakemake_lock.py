"""Release the lock a killed Snakemake left behind, never one that a live Snakemake holds.

While it runs, Snakemake locks its working directory: the files
``.snakemake/locks/<n>.input.lock`` and ``<n>.output.lock`` list what it reads
and writes, and a second Snakemake whose files overlap refuses to start
(``LockException``: "... can be removed with the --unlock argument"). The lock
files name no process, so a Snakemake killed by SIGKILL, the OOM killer or a
power loss leaves them behind and every later run refuses until someone runs
``snakemake --unlock``; unlocking while another Snakemake runs would let two
of them write the same files.

``workflow/rules/common.smk`` calls :func:`on_parse` while Snakemake parses the
workflow, which is before Snakemake checks its lock, in the main Snakemake
process only (not in the Snakemake processes that run cluster jobs). It
removes the lock files only when nothing can still hold them:

- no other process on this machine runs Snakemake or an ``adloco`` command
  in this working directory (read from ``/proc``: command line and working
  directory; the processes that started this Snakemake, such as ``make``, do
  not count). An ``adloco`` job that outlived its killed Snakemake still
  writes its outputs, so it blocks the release too;
- no Snakemake on another machine may be running here: every Snakemake that
  parses the workflow records its host and process in
  ``.snakemake/adloco-owners/`` and removes the record when it exits. A
  record of another host counts as running (this machine cannot see that
  host's processes); a record of this host counts only while its process lives.

Otherwise the lock stays, Snakemake refuses as before, and a message says what
may hold it. Without ``/proc`` (not Linux) nothing can be checked and the lock
always stays. ``snakemake --unlock`` also clears the records of other processes.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LOCKS = Path(".snakemake") / "locks"
OWNERS = Path(".snakemake") / "adloco-owners"
PROC = Path("/proc")
# A command that runs Snakemake or an adloco stage: the program's name as a
# word of the command line (`.venv/bin/snakemake`, `python -m adloco train`,
# `bash -c '... adloco train ...'`, `torchrun ... adloco train`).
_COMMAND = re.compile(r"(?:^|[\s/;&|(`'\"])(snakemake|adloco)(?=$|[\s;&|)`'\"])")


@dataclass(frozen=True)
class Holder:
    """A process that may hold the lock."""

    pid: int
    host: str
    command: str

    def describe(self) -> str:
        where = "" if self.host == socket.gethostname() else f" on host {self.host}"
        return f"process {self.pid}{where} ({self.command})"


def lock_files(workdir: str | Path) -> list[Path]:
    folder = Path(workdir) / LOCKS
    return sorted(folder.glob("*.lock")) if folder.is_dir() else []


def can_inspect() -> bool:
    """Whether this machine shows every process's command line and working directory."""
    return (PROC / "self" / "cwd").exists()


def _read_argv(pid: int) -> list[str] | None:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # Field 2, the command name, is in parentheses and may hold spaces.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def _parent(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def ancestors(pid: int | None = None) -> set[int]:
    """``pid`` (default: this process) and every process above it."""
    pid = os.getpid() if pid is None else pid
    seen: set[int] = set()
    while pid and pid not in seen:
        seen.add(pid)
        pid = _parent(pid)
    return seen


def is_workflow_command(argv: list[str]) -> bool:
    return bool(_COMMAND.search(" ".join(argv)))


def local_processes(workdir: str | Path, exclude: set[int] | None = None) -> list[Holder]:
    """Other processes of this machine that run Snakemake or adloco in ``workdir``."""
    target = os.path.realpath(workdir)
    exclude = ancestors() if exclude is None else exclude
    host = socket.gethostname()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:  # gone, or another user's process
            continue
        if os.path.realpath(cwd) != target:
            continue
        argv = _read_argv(int(entry.name))
        if argv and is_workflow_command(argv):
            found.append(Holder(int(entry.name), host, " ".join(argv)[:200]))
    return found


def _record_path(workdir: str | Path, host: str, pid: int) -> Path:
    return Path(workdir) / OWNERS / f"{host}.{pid}.json"


def register(workdir: str | Path) -> Path | None:
    """Record this Snakemake as a possible lock holder until it exits; the record's path."""
    host, pid = socket.gethostname(), os.getpid()
    path = _record_path(workdir, host, pid)
    record = {
        "host": host,
        "pid": pid,
        "start_time": _start_time(pid),
        "command": " ".join(_read_argv(pid) or [])[:200],
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record) + "\n")
    except OSError:
        return None
    atexit.register(_remove, path)
    return path


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def recorded_holders(workdir: str | Path, clear: bool = False) -> list[Holder]:
    """Recorded Snakemake processes that may still run; records of dead ones are removed.

    With ``clear`` (``snakemake --unlock``), every record but this process's is removed.
    """
    folder = Path(workdir) / OWNERS
    if not folder.is_dir():
        return []
    host, me = socket.gethostname(), os.getpid()
    holders = []
    for path in sorted(folder.glob("*.json")):
        try:
            record = json.loads(path.read_text())
            rec_host, pid = str(record["host"]), int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            _remove(path)
            continue
        if rec_host == host and pid == me:
            continue
        if clear:
            _remove(path)
            continue
        if rec_host == host and can_inspect():
            started = _start_time(pid)
            if started is None or started != record.get("start_time"):
                _remove(path)  # that process is gone (or its pid now belongs to another)
                continue
        holders.append(Holder(pid, rec_host, str(record.get("command", "snakemake"))))
    return holders


def release_stale_lock(workdir: str | Path, clear_records: bool = False) -> tuple[bool, str]:
    """Remove the lock files of ``workdir`` when nothing can hold them.

    Returns whether a lock was removed and a message for the user ("" when
    there was no lock).
    """
    workdir = Path(workdir)
    locks = lock_files(workdir)
    holders = recorded_holders(workdir, clear=clear_records)
    if not locks:
        return False, ""
    if not can_inspect():
        return False, (
            f"{workdir / LOCKS} holds a Snakemake lock and this system cannot show which "
            "processes run here; if no other Snakemake runs in this directory, run "
            "`snakemake --unlock` once, then the same command again"
        )
    holders += local_processes(workdir)
    if holders:
        listed = "; ".join(h.describe() for h in holders[:5])
        return False, (
            f"{workdir / LOCKS} is locked and may be held by {listed}: the lock is left "
            "alone. Wait for it to finish (or end it); if it is certainly not running, "
            "run `snakemake --unlock` once, then the same command again"
        )
    for path in locks:
        _remove(path)
    return True, (
        f"removed the lock a killed Snakemake left in {workdir / LOCKS} (no Snakemake or "
        "adloco process runs in this directory); jobs it left half-done run again"
    )


def on_parse(
    workdir: str | Path, unlock: bool = False, log: Callable[[str], None] | None = None
) -> bool:
    """What common.smk runs in the main Snakemake process: release a stale lock, then register.

    Returns whether a lock was removed.
    """
    released, message = release_stale_lock(workdir, clear_records=unlock)
    if message and log is not None:
        log(message)
    register(workdir)
    return released
