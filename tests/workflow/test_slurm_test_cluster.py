"""scripts/slurm-test-cluster.py without a cluster: what it writes and what ``stop`` touches.

The real cluster runs under ``make test-slurm`` (test_slurm_real.py); here its
configuration, its ``srun`` for the profile's jobs and its ``stop`` are checked
against stand-in SLURM clients, so that a cluster that would reach outside its
folder, or a ``stop`` that would cancel another cluster's jobs, fails in the
fast tier.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts/slurm-test-cluster.py"
NODE = {
    "NodeName": "host",
    "CPUs": "2",
    "Boards": "1",
    "SocketsPerBoard": "1",
    "CoresPerSocket": "1",
    "ThreadsPerCore": "2",
    "RealMemory": "20000",
}


def load_cluster():
    spec = importlib.util.spec_from_file_location("slurm_test_cluster", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cluster = load_cluster()


def test_every_file_the_configuration_names_is_in_the_clusters_folder(tmp_path):
    conf = cluster.slurm_conf(tmp_path, NODE)
    paths = re.findall(r"(?:=|\bsocket=)(/[^\s]+)", conf)
    # State, spool, pid and log files, the SPANK plugin list and the munge socket.
    assert len(paths) >= 9, paths
    assert all(Path(p).is_relative_to(tmp_path) for p in paths), paths
    assert f"AuthInfo=socket={tmp_path}/munge/munge.socket.2" in conf.splitlines()
    assert f"PlugStackConfig={tmp_path}/plugstack.conf" in conf.splitlines()
    assert "/etc/" not in conf and "/run/" not in conf
    assert f"ClusterName={cluster.CLUSTER_NAME}" in conf.splitlines()
    # 85 % of the memory is declared.
    assert "RealMemory=17000 " in conf


def test_start_prints_the_exports_that_reach_the_cluster_and_its_srun(tmp_path):
    lines = cluster.exports(tmp_path / "a b").splitlines()
    assert lines == [
        f"export SLURM_CONF='{tmp_path}/a b/slurm.conf'",
        f"export PATH='{tmp_path}/a b/bin':\"$PATH\"",
    ]


def test_its_srun_puts_back_the_configuration_the_plugins_job_step_drops(tmp_path):
    # The real srun, as a stand-in: it prints the configuration it would read and its arguments.
    real = tmp_path / "real-srun"
    real.write_text(
        '#!/bin/sh\necho "conf=${SLURM_CONF:-none}"\nfor a in "$@"; do echo "[$a]"; done\n'
    )
    real.chmod(0o755)
    root = tmp_path / "cluster dir"
    root.mkdir()
    srun = root / "bin/srun"
    srun.parent.mkdir()
    srun.write_text(cluster.srun_wrapper(root, str(real)))
    srun.chmod(0o755)
    # As the job step runs it: every SLURM_* variable but the job's identity removed.
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "7"}
    done = subprocess.run(
        [str(srun), "-n1", "sh -c 'x y'"], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [f"conf={root}/slurm.conf", "[-n1]", "[sh -c 'x y']"]


def stand_in_clients(tmp_path: Path, cluster_name: str, port: str, jobs: list[str]) -> Path:
    """scontrol, squeue and scancel as scripts: each call is recorded with its SLURM_CONF."""
    bin_dir, calls = tmp_path / "clients", tmp_path / "calls"
    bin_dir.mkdir()
    answers = {
        "scontrol": f"echo 'ClusterName             = {cluster_name}'\n"
        f"echo 'SlurmctldPort           = {port}'\n",
        # The job list; the wait for running jobs (-t) finds none left.
        "squeue": 'case "$*" in *-t*) ;; *) printf "%s\\n" ' + " ".join(jobs) + " ;; esac\n",
        "scancel": "",
    }
    for name, answer in answers.items():
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "$SLURM_CONF {name} $*" >> {calls}\n{answer}')
        script.chmod(0o755)
    return bin_dir


def started_folder(tmp_path: Path) -> tuple[Path, str]:
    root = tmp_path / "cluster"
    root.mkdir()
    conf = cluster.slurm_conf(root, NODE)
    (root / "slurm.conf").write_text(conf)
    port = re.search(r"^SlurmctldPort=(\d+)$", conf, re.M).group(1)
    return root, port


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_stop_cancels_the_jobs_its_own_controller_lists_by_id(tmp_path, monkeypatch):
    root, port = started_folder(tmp_path)
    bin_dir = stand_in_clients(tmp_path, cluster.CLUSTER_NAME, port, ["11", "12"])
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")  # the machine's, if any
    cluster.stop(root)
    made = calls(tmp_path)
    conf = f"{root}/slurm.conf"
    assert all(line.startswith(conf + " ") for line in made), made
    cancels = [line.removeprefix(conf + " ") for line in made if " scancel " in line]
    assert cancels == ["scancel --quiet 11 12"]
    assert not any("--user" in line for line in made)


@pytest.mark.parametrize(
    "answer", [("other-cluster", None), ("adloco-test", "1")], ids=["name", "port"]
)
def test_stop_cancels_nothing_when_another_controller_answers(
    tmp_path, monkeypatch, capsys, answer
):
    root, port = started_folder(tmp_path)
    name, other_port = answer
    bin_dir = stand_in_clients(tmp_path, name, other_port or port, ["11"])
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    cluster.stop(root)
    assert not any(" scancel " in line for line in calls(tmp_path))
    assert "no job cancelled: the controller answering is cluster" in capsys.readouterr().err


def test_stop_without_a_controller_cancels_nothing(tmp_path, monkeypatch):
    root, _ = started_folder(tmp_path)
    bin_dir = tmp_path / "clients"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "scontrol").chmod(0o755)
    (bin_dir / "scancel").write_text(f"#!/bin/sh\necho scancel >> {tmp_path / 'calls'}\n")
    (bin_dir / "scancel").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    cluster.stop(root)
    assert calls(tmp_path) == []


def test_stop_signals_only_a_recorded_pid_that_is_still_its_daemon(tmp_path, monkeypatch):
    root, _ = started_folder(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")  # no clients: nothing to cancel
    # A pid file whose daemon is gone and whose pid now belongs to another process.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (root / "slurmctld.pid").write_text(f"{other.pid}\n")
        cluster.stop(root)
        assert other.poll() is None  # left running
    finally:
        other.kill()
        other.wait()
    # A process that is the daemon it names (its command name, as /proc gives it) is stopped.
    daemon = tmp_path / "slurmd"
    shutil.copy(shutil.which("sleep", path="/usr/bin:/bin"), daemon)
    proc = subprocess.Popen([str(daemon), "60"])
    try:
        for _ in range(100):  # until it runs the program (before, /proc names the fork)
            if Path(f"/proc/{proc.pid}/comm").read_text().strip() == "slurmd":
                break
            time.sleep(0.05)
        (root / "slurmd.pid").write_text(f"{proc.pid}\n")
        cluster.stop(root)
        assert proc.wait(timeout=15) == -15  # SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_script_writes_nowhere_machine_wide():
    text = SCRIPT.read_text()
    code = text.split('"""', 2)[2]  # the docstring names the paths it leaves alone
    for path in ("/etc/slurm", "/run/munge", "/var/run/munge", "symlink_to", "--user"):
        assert path not in code, path
    assert os.access(SCRIPT, os.X_OK)
