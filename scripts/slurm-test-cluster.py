#!/usr/bin/env python3
"""A private single-node SLURM on this machine, for testing the SLURM profile for real.

    scripts/slurm-test-cluster.py start --dir /tmp/slurm   # prints the two exports below
    export SLURM_CONF=/tmp/slurm/slurm.conf PATH=/tmp/slurm/bin:$PATH
    sinfo; sbatch ...
    scripts/slurm-test-cluster.py stop --dir /tmp/slurm

``start`` (as root) writes a ``slurm.conf`` describing this machine as it is
(CPUs and memory from ``slurmd -C``, 85 % of the memory declared so the jobs'
own memory has room) and starts its own ``munged`` (its own key), ``slurmctld``
and ``slurmd``, every file they use (configuration, key, munge socket, state,
spool, logs, pid files) inside ``--dir``, on two free ports, then waits for
``sinfo`` to show the node idle. Clients find this cluster only through
``SLURM_CONF``: nothing is written to ``/etc/slurm`` or ``/run/munge``, so a
machine's own cluster, and every client that does not set ``SLURM_CONF``, is
left alone. ``stop`` cancels the jobs this cluster's own controller lists
(after checking that the controller answering is this cluster's), stops the
daemons it started, by the pids it recorded, and nothing else.

Where it cannot stay private, and why:

* ``srun`` inside a job of the SLURM profile: the executor plugin's job step
  (snakemake-executor-plugin-slurm-jobstep 0.6.1) removes every ``SLURM_*``
  variable but the job's identity, ``SLURM_CONF`` among them, before it runs
  ``srun``, which would then read ``/etc/slurm/slurm.conf``. ``--dir``'s
  ``bin/srun`` puts ``SLURM_CONF`` back and runs the real ``srun``; it reaches
  the jobs through ``PATH`` (the plugin submits with ``--export=ALL``), so
  ``PATH`` must start with ``--dir``'s ``bin`` wherever the profile runs.
* Root: ``slurmd`` starts jobs as the user who submitted them, and ``munged``
  runs as the ``munge`` user; both need root to start.
* ``--install`` (only when a program is missing) installs Debian's packages
  for the whole machine with ``apt-get``; their own scripts create the
  ``munge`` and ``slurm`` users and ``/etc/munge/munge.key`` (which this
  cluster does not use).
* The daemons listen on two TCP ports (free ones) of this machine; the node
  takes the machine's host name; jobs run here, as their users, at nice 19,
  with no cgroup limits (``proctrack/linuxproc``, ``task/none``).

Accounting is off (``accounting_storage/none``): ``sacct`` answers nothing, so
the SLURM profile takes job states from ``squeue``, and ``MinJobAge`` keeps a
finished job in ``squeue`` and ``scontrol show job`` for 10 minutes (longer than
the plugin's status polling, and long enough to read a job's requests back).
Tested with Debian bookworm's Slurm 22.05 and munge 0.5.15.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
DAEMONS = ("slurmd", "slurmctld", "munged")  # stopped in this order
CLUSTER_NAME = "adloco-test"
PARTITION = "debug"
MEMORY_SHARE = 0.85
IDLE_TIMEOUT_S = 90
CLIENT_TIMEOUT_S = 30


# What slurm.conf's node line takes from `slurmd -C`, in its order.
NODE_FIELDS = (
    "NodeName", "CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore",
    "RealMemory",
)  # fmt: skip


class ClusterError(RuntimeError):
    """SLURM could not be started here; the message says why."""


def conf_path(root: Path) -> Path:
    return root / "slurm.conf"


def munge_socket(root: Path) -> Path:
    """The cluster's own munged socket (slurm.conf's AuthInfo names it)."""
    return root / "munge" / "munge.socket.2"


def bin_dir(root: Path) -> Path:
    """``srun`` with ``SLURM_CONF`` put back, for the jobs (first on their PATH)."""
    return root / "bin"


def _which(name: str) -> str | None:
    """``name`` on PATH or in the sbin folders, where Debian puts the daemons."""
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin")


def missing_programs() -> list[str]:
    programs = ("slurmctld", "slurmd", "sinfo", "sbatch", "srun", "munged", "mungekey")
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
ClusterName={CLUSTER_NAME}
SlurmctldHost={name}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
AuthType=auth/munge
# The cluster's own munged (its own key), not the machine's default socket.
AuthInfo=socket={munge_socket(root)}
PlugStackConfig={root}/plugstack.conf
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


def srun_wrapper(root: Path, real_srun: str) -> str:
    """``srun`` for the profile's jobs: the plugin's job step drops ``SLURM_CONF``."""
    return (
        "#!/bin/sh\n"
        "# scripts/slurm-test-cluster.py: the executor plugin's job step removes\n"
        "# SLURM_CONF before it runs srun; this cluster's configuration, put back.\n"
        f"SLURM_CONF={shlex.quote(str(conf_path(root)))}\n"
        "export SLURM_CONF\n"
        f'exec {shlex.quote(real_srun)} "$@"\n'
    )


def write_bin(root: Path) -> None:
    folder = bin_dir(root)
    folder.mkdir(exist_ok=True)
    srun = folder / "srun"
    srun.write_text(srun_wrapper(root, program("srun")))
    srun.chmod(0o755)


def environment(root: Path) -> dict[str, str]:
    return dict(os.environ, SLURM_CONF=str(conf_path(root)))


def exports(root: Path) -> str:
    """The shell lines that point clients, and the profile's jobs, at this cluster."""
    conf, path = shlex.quote(str(conf_path(root))), shlex.quote(str(bin_dir(root)))
    return f'export SLURM_CONF={conf}\nexport PATH={path}:"$PATH"'


def _run(cmd: list[str], root: Path, what: str) -> None:
    done = subprocess.run(cmd, env=environment(root), capture_output=True, text=True)
    if done.returncode != 0:
        raise ClusterError(f"{what} did not start: {(done.stderr or done.stdout).strip()[-400:]}")


def munge_works(socket_path: Path) -> bool:
    """Whether a munged answers on ``socket_path`` (a credential round trip)."""
    if shutil.which("munge") is None or not socket_path.exists():
        return False
    where = f"--socket={socket_path}"
    encode = subprocess.run(["munge", where, "-n"], capture_output=True)
    if encode.returncode != 0:
        return False
    decode = subprocess.run(["unmunge", where], input=encode.stdout, capture_output=True)
    return decode.returncode == 0


def start_munge(root: Path) -> None:
    """The cluster's own munged: its key, socket, pid and log in ``root/munge``."""
    reach = subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", f"test -x '{root}'"])
    if reach.returncode != 0:
        raise ClusterError(
            f"the munge user cannot enter {root}: choose a --dir whose folders others may enter"
        )
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
        f"--socket={munge_socket(root)}",
        f"--key-file={key}",
        f"--pid-file={munge}/munged.pid",
        f"--log-file={munge}/munged.log",
        f"--seed-file={munge}/munged.seed",
        "--force",  # the key's folder may lie under a world-writable /tmp
    ]
    _run(["su", "-s", "/bin/sh", "munge", "-c", shlex.join(daemon)], root, "munged")
    if not munge_works(munge_socket(root)):
        raise ClusterError(f"munged does not answer on {munge_socket(root)}")


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
    if root.exists() and any(root.iterdir()):
        raise ClusterError(
            f"{root} is not empty: stop the cluster there first, or choose a new --dir"
        )
    for sub in ("ctld", "d", "log"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    conf_path(root).write_text(slurm_conf(root, node_line()))
    (root / "plugstack.conf").write_text("# no SPANK plugins (not the machine's plugstack.conf)\n")
    write_bin(root)
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


def _client(root: Path, args: list[str]) -> subprocess.CompletedProcess | None:
    """A SLURM client run against this cluster alone (``SLURM_CONF``), or None if missing."""
    path = shutil.which(args[0], path=environment(root).get("PATH"))
    if path is None:
        return None
    try:
        return subprocess.run(
            [path, *args[1:]],
            env=environment(root),
            capture_output=True,
            text=True,
            timeout=CLIENT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None


def answering_controller(root: Path) -> str | None:
    """Why the controller ``SLURM_CONF`` reaches is not this cluster's, or None if it is."""
    done = _client(root, ["scontrol", "show", "config"])
    if done is None or done.returncode != 0:
        return "no controller answers"
    shown = dict(
        (k.strip(), v.strip())
        for k, v in (line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    )
    port = next(
        (line.split("=", 1)[1] for line in conf_path(root).read_text().splitlines()
         if line.startswith("SlurmctldPort=")),
        None,
    )  # fmt: skip
    theirs = (shown.get("ClusterName"), shown.get("SlurmctldPort"))
    if theirs != (CLUSTER_NAME, port):
        return f"the controller answering is cluster {theirs[0]} on port {theirs[1]}"
    return None


def own_jobs(root: Path) -> list[str]:
    """Every job this cluster's controller lists, of every user."""
    done = _client(root, ["squeue", "--all", "-h", "-o", "%i"])
    if done is None or done.returncode != 0:
        return []
    return done.stdout.split()


def cancel_own_jobs(root: Path) -> None:
    """Cancel the jobs this cluster ran, by id, and wait (20 s at most) for them to end."""
    if not conf_path(root).exists():
        return
    problem = answering_controller(root)
    if problem is not None:
        print(f"slurm-test-cluster: no job cancelled: {problem}", file=sys.stderr)
        return
    jobs = own_jobs(root)
    if not jobs:
        return
    _client(root, ["scancel", "--quiet", *jobs])
    for _ in range(40):
        done = _client(root, ["squeue", "--all", "-h", "-t", "RUNNING,COMPLETING", "-o", "%i"])
        if done is None or done.returncode != 0 or not done.stdout.strip():
            break
        time.sleep(0.5)


def _is_daemon(pid: int, name: str) -> bool:
    """Whether ``pid`` is a live ``name`` process (a pid file may outlive its daemon)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    command, _, rest = stat.partition(" (")[2].rpartition(") ")
    return command == name and not rest.startswith(("Z", "X"))  # a zombie has ended


def stop(root: Path) -> None:
    """Cancel the cluster's jobs, then stop the daemons whose pids it recorded."""
    cancel_own_jobs(root)
    for name in DAEMONS:
        pid = _pid(root / ("munge" if name == "munged" else "") / f"{name}.pid")
        if pid is None or not _is_daemon(pid, name):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(100):
            if not _is_daemon(pid, name):
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
            print(exports(root))
        else:
            stop(root)
    except ClusterError as exc:
        print(f"slurm-test-cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
