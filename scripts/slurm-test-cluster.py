#!/usr/bin/env python3
"""A private single-node SLURM on this machine, for testing the SLURM profile for real.

    scripts/slurm-test-cluster.py start --dir /tmp/slurm   # prints: export SLURM_CONF=...
    export SLURM_CONF=/tmp/slurm/slurm.conf; sinfo; sbatch ...
    scripts/slurm-test-cluster.py stop --dir /tmp/slurm

``start`` (as root) installs Debian's Slurm and munge when they are missing
(``--install``), writes a ``slurm.conf`` describing this machine as it is (CPUs
and memory from ``slurmd -C``, 85 % of the memory declared so the jobs' own
memory has room), starts ``munged``, ``slurmctld`` and ``slurmd`` with every
file (key, socket, state, logs, pid files) inside ``--dir`` and on free ports,
and waits for ``sinfo`` to show the node idle. Nothing outside ``--dir`` is
written, so a machine's own cluster (``/etc/slurm``, ``/run/munge``) is left
alone; clients find the private cluster through ``SLURM_CONF``. ``stop``
cancels the cluster's jobs and stops the daemons it started, by the pids it
recorded, and nothing else.

Accounting is off (``accounting_storage/none``): ``sacct`` answers nothing, so
the SLURM profile takes job states from ``squeue``, and ``MinJobAge`` keeps a
finished job in ``squeue`` and ``scontrol show job`` for 10 minutes (longer than
the plugin's status polling, and long enough to read a job's requests back).
Tested with Debian bookworm's Slurm 22.05 and munge 0.5.15.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
DAEMONS = ("slurmd", "slurmctld", "munged")  # stopped in this order
PARTITION = "debug"
MEMORY_SHARE = 0.85
IDLE_TIMEOUT_S = 90
# Where job steps look for the configuration: the executor plugin's job step drops
# every SLURM_* variable, SLURM_CONF among them, before its srun.
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


# What slurm.conf's node line takes from `slurmd -C`, in its order.
NODE_FIELDS = (
    "NodeName", "CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore",
    "RealMemory",
)  # fmt: skip


class ClusterError(RuntimeError):
    """SLURM could not be started here; the message says why."""


def _which(name: str) -> str | None:
    """``name`` on PATH or in the sbin folders, where Debian puts the daemons."""
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin")


def missing_programs() -> list[str]:
    programs = ("slurmctld", "slurmd", "sinfo", "sbatch", "munged", "mungekey")
    return [p for p in programs if _which(p) is None]


def install() -> None:
    """Debian's packages, when a program is missing (root and apt-get needed)."""
    if not missing_programs():
        return
    if shutil.which("apt-get") is None:
        raise ClusterError(f"SLURM is not installed ({', '.join(missing_programs())} missing)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise ClusterError(
                f"apt-get could not install {' '.join(PACKAGES)}: {done.stderr[-400:]}"
            )


def program(name: str) -> str:
    path = _which(name)
    if path is None:
        raise ClusterError(f"{name} is not installed (run with --install, as root)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_line() -> dict[str, str]:
    """This machine as ``slurmd -C`` sees it (CPUs, sockets, cores, threads, memory in MB)."""
    out = subprocess.run([program("slurmd"), "-C"], capture_output=True, text=True, check=True)
    fields = dict(f.split("=", 1) for f in out.stdout.split("\n")[0].split() if "=" in f)
    return {k: fields[k] for k in NODE_FIELDS if k in fields}


def slurm_conf(root: Path, node: dict[str, str]) -> str:
    """The minimal configuration of a one-node test cluster (every path under ``root``)."""
    memory_mb = int(int(node["RealMemory"]) * MEMORY_SHARE)
    shape = " ".join(f"{k}={node[k]}" for k in node if k not in ("NodeName", "RealMemory"))
    name = node["NodeName"]
    return f"""\
# A one-node test cluster (scripts/slurm-test-cluster.py); every file under {root}.
ClusterName=adloco-test
SlurmctldHost={name}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
AuthType=auth/munge
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/d
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.log
# Finished jobs stay in squeue and scontrol for 10 minutes: the SLURM profile's
# status polling (squeue, accounting being off) must see them end.
MinJobAge=600
NodeName={name} NodeAddr=127.0.0.1 {shape} RealMemory={memory_mb} State=UNKNOWN
PartitionName={PARTITION} Nodes={name} Default=YES MaxTime=INFINITE State=UP
"""


def environment(root: Path) -> dict[str, str]:
    return dict(os.environ, SLURM_CONF=str(root / "slurm.conf"))


def _run(cmd: list[str], root: Path, what: str) -> None:
    done = subprocess.run(cmd, env=environment(root), capture_output=True, text=True)
    if done.returncode != 0:
        raise ClusterError(f"{what} did not start: {(done.stderr or done.stdout).strip()[-400:]}")


def munge_works() -> bool:
    """Whether a munged answers on the default socket (then the cluster uses it)."""
    if shutil.which("munge") is None or not MUNGE_SOCKET.exists():
        return False
    encode = subprocess.run(["munge", "-n"], capture_output=True)
    if encode.returncode != 0:
        return False
    return subprocess.run(["unmunge"], input=encode.stdout, capture_output=True).returncode == 0


def start_munge(root: Path) -> None:
    """A munged on the default socket, its key and logs in ``root``, unless one runs already."""
    if munge_works():
        return
    reach = subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", f"test -x '{root}'"])
    if reach.returncode != 0:
        raise ClusterError(
            f"the munge user cannot enter {root}: choose a --dir whose folders others may enter"
        )
    MUNGE_SOCKET.parent.mkdir(parents=True, exist_ok=True)
    shutil.chown(MUNGE_SOCKET.parent, "munge", "munge")
    munge = root / "munge"
    munge.mkdir()
    os.chmod(munge, 0o755)  # clients of any user reach the socket; only munge writes
    key = munge / "munge.key"
    _run([program("mungekey"), "--create", f"--keyfile={key}"], root, "mungekey")
    shutil.chown(munge, "munge", "munge")
    shutil.chown(key, "munge", "munge")
    os.chmod(key, 0o400)
    daemon = [
        program("munged"),
        f"--socket={MUNGE_SOCKET}",
        f"--key-file={key}",
        f"--pid-file={munge}/munged.pid",
        f"--log-file={munge}/munged.log",
        f"--seed-file={munge}/munged.seed",
        "--force",  # the key's folder may lie under a world-writable /tmp
    ]
    _run(["su", "-s", "/bin/sh", "munge", "-c", " ".join(daemon)], root, "munged")


def node_state(root: Path) -> str:
    done = subprocess.run(
        [program("sinfo"), "-h", "-o", "%T"], env=environment(root), capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def start(root: Path, with_install: bool) -> None:
    """Start the cluster; on a failure part-way, stop what was started, then raise."""
    if os.geteuid() != 0:
        raise ClusterError("starting slurmd and munged needs root")
    if with_install:
        install()
    if os.path.lexists(SYSTEM_CONF):
        raise ClusterError(
            f"{SYSTEM_CONF} exists: this machine has a SLURM configuration of its own, which "
            "the test cluster would replace; run the SLURM tests on a machine without one"
        )
    if root.exists() and any(root.iterdir()):
        raise ClusterError(
            f"{root} is not empty: stop the cluster there first, or choose a new --dir"
        )
    for sub in ("ctld", "d", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "slurm.conf").write_text(slurm_conf(root, node_line()))
    SYSTEM_CONF.parent.mkdir(parents=True, exist_ok=True)
    SYSTEM_CONF.symlink_to(root / "slurm.conf")
    try:
        start_daemons(root)
    except BaseException:
        stop(root)
        raise


def start_daemons(root: Path) -> None:
    start_munge(root)
    _run([program("slurmctld")], root, "slurmctld")
    # Job steps inherit slurmd's niceness: the tests' jobs yield to interactive work.
    _run(["nice", "-n", "19", program("slurmd")], root, "slurmd")
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while (state := node_state(root)) != "idle":
        if time.monotonic() > deadline:
            logs = "".join(
                p.read_text()[-600:] for p in sorted((root / "log").glob("*.log")) if p.exists()
            )
            raise ClusterError(f"the node is {state or 'unknown'} after {IDLE_TIMEOUT_S} s: {logs}")
        time.sleep(0.5)


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop(root: Path) -> None:
    """Cancel the cluster's jobs, then stop the daemons whose pids it recorded."""
    if (root / "slurm.conf").exists() and shutil.which("scancel"):
        subprocess.run(["scancel", "--full", "--quiet", "--user", "root"], env=environment(root))
        for _ in range(40):
            done = subprocess.run(
                ["squeue", "-h", "-t", "RUNNING,COMPLETING"],
                env=environment(root),
                capture_output=True,
                text=True,
            )
            if done.returncode != 0 or not done.stdout.strip():
                break
            time.sleep(0.5)
    if SYSTEM_CONF.is_symlink() and SYSTEM_CONF.resolve() == (root / "slurm.conf").resolve():
        SYSTEM_CONF.unlink()
    for name in DAEMONS:
        pid = _pid(root / ("munge" if name == "munged" else "") / f"{name}.pid")
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--dir", type=Path, required=True, help="the cluster's private folder")
    parser.add_argument("--install", action="store_true", help="apt-get the packages if missing")
    args = parser.parse_args(argv)
    root = args.dir.resolve()
    try:
        if args.action == "start":
            start(root, args.install)
            print(f"export SLURM_CONF={root / 'slurm.conf'}")
        else:
            stop(root)
    except ClusterError as exc:
        print(f"slurm-test-cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
