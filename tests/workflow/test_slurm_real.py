"""The SLURM profile on a real SLURM: a one-node cluster started for these tests.

``make test-slurm`` runs them (``.ci/run`` does, after the suite): as root, it
installs Debian's Slurm and munge when missing and starts a private one-node
cluster describing this machine (scripts/slurm-test-cluster.py: its CPUs and
memory, no accounting). Then, with the profile as a user types it:

* the test preset runs through ``sbatch`` end to end: every job but the local
  report is a SLURM job, each asking SLURM (read back with ``scontrol show job``)
  for the CPUs, memory and time its rule declares, and the results equal a local
  run's but for wall times (scripts/compare-results.py);
* a training job cancelled mid-run with ``scancel`` is resubmitted by the profile
  and resumes from its checkpoint, to the metrics of an uninterrupted run;
* a preset whose training job no node can hold is refused before anything is
  submitted, with SLURM's reason;
* a 2-task ``sbatch`` (``srun`` starting one torchrun agent a task, rendezvous on
  the allocation's first node) trains the test preset's DiLoCo run to the metrics
  of one process at one thread a rank;
* the cluster is private: nothing at /etc/slurm/slurm.conf or the default munge
  socket, clients without its ``SLURM_CONF`` do not reach it, and ``stop`` on a
  second cluster started beside it cancels that cluster's job only.

Elsewhere (no root, no packages) they are skipped with the reason; under CI
(``CI`` set) they fail instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from test_pipeline_wiring import BIN, make_copy
from test_snakemake import ROOT, SNAKEMAKE, parse_dry_run

from adloco_workflow.slurm import minutes, status_command

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

CLUSTER = ROOT / "scripts/slurm-test-cluster.py"
COMPARE = ROOT / "scripts/compare-results.py"
PROFILE = "profiles/slurm"
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
DEFAULT_MUNGE_SOCKET = Path("/run/munge/munge.socket.2")
ENABLE = "ADLOCO_SLURM_TESTS"
PIPELINE_TIMEOUT_S = 1200
# Rounds of the cancelled run: long enough (about 0.1 s a round here) to cancel it
# part-way, short enough to keep the step in its minutes.
CANCEL_ROUNDS = 150
TIME_KEYS = ("wall_time_s", "step_time_measured", "train_seconds")
MEASURED = re.compile(r"pass time by micro-batch [^<]*")
# Two ranks reduce the validation sums in another order than one process: equal
# to one process within these (tests/engine/test_distributed.py's tolerances).
REL_TOL, ABS_TOL = 1e-5, 1e-7


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.environ.get(ENABLE) != "1":
        pytest.skip(f"real-SLURM tests run with `make test-slurm` ({ENABLE}=1; as root)")
    # Not under pytest's private tmp folder: munged runs as the munge user, who
    # must reach its key and log in the cluster's folder.
    before = {p: p.exists() for p in (SYSTEM_CONF, DEFAULT_MUNGE_SOCKET)}
    root, env = start_cluster("adloco-slurm-")
    try:
        yield SimpleNamespace(root=root, env=env, before=before)
    finally:
        stop_cluster(root)


def start_cluster(prefix: str) -> tuple[Path, dict[str, str]]:
    """A test cluster in a new folder, and the environment its start printed to export."""
    # Not under pytest's private tmp folder: munged runs as the munge user, who
    # must reach its key and log in the cluster's folder.
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    started = subprocess.run(
        [sys.executable, str(CLUSTER), "start", "--install", "--dir", str(root)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if started.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        reason = started.stderr.strip() or started.stdout.strip()
        if os.environ.get("CI"):
            pytest.fail(f"SLURM could not be started under CI: {reason}")
        pytest.skip(reason)
    # What start prints: export SLURM_CONF=... and export PATH=<dir>/bin:"$PATH".
    printed = dict(
        line.removeprefix("export ").split("=", 1) for line in started.stdout.split("\n") if line
    )
    assert printed == {
        "SLURM_CONF": str(root / "slurm.conf"),
        "PATH": f'{root / "bin"}:"$PATH"',
    }, started.stdout
    env = {
        **os.environ,
        "SLURM_CONF": str(root / "slurm.conf"),
        "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
    }
    return root, env


def stop_cluster(root: Path) -> None:
    subprocess.run(
        [sys.executable, str(CLUSTER), "stop", "--dir", str(root)], timeout=120, check=False
    )
    shutil.rmtree(root, ignore_errors=True)


def slurm(args: list[str], env: dict[str, str], cwd: Path | None = None) -> str:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout


def jobs_in(workdir: Path, env: dict[str, str]) -> list[dict[str, str]]:
    """Every job SLURM still shows (MinJobAge 10 minutes) that ran in ``workdir``."""
    out = slurm(["scontrol", "show", "job", "-o"], env)
    jobs = []
    for line in out.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if fields.get("WorkDir") == str(workdir):
            jobs.append(fields)
    return jobs


def megabytes(memory: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([MGT]?)", memory).groups()
    return int(number) * {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]


def snakemake(work: Path, env: dict[str, str], *args: str, timeout: int = PIPELINE_TIMEOUT_S):
    return subprocess.run(
        [SNAKEMAKE, *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory):
    work, env = make_copy(tmp_path_factory.mktemp("on-slurm"), fake=False)
    # The cluster's SLURM_CONF, and its bin first on PATH: the plugin's job step drops
    # SLURM_CONF before its srun, and the cluster's srun puts it back.
    env = {
        **env,
        "SLURM_CONF": cluster.env["SLURM_CONF"],
        "PATH": f"{cluster.root / 'bin'}:{env['PATH']}",
    }
    done = snakemake(work, env, "--workflow-profile", PROFILE, "--configfile", "config/test.yaml")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return SimpleNamespace(work=work, env=env, log=done.stdout + done.stderr)


def test_every_cluster_job_asks_slurm_for_what_its_rule_declares(slurm_run):
    dry = subprocess.run(
        [SNAKEMAKE, "-n", "--forceall", "--workflow-profile", PROFILE]
        + ["--configfile", "config/test.yaml"],
        cwd=slurm_run.work,
        env=slurm_run.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    declared: dict[str, list[tuple[int, int, float]]] = {}
    for job in parse_dry_run(dry.stdout + dry.stderr):
        if job["rule"] in ("default", "all", "report"):
            continue  # the targets, and the report (a local rule)
        r = job["resources"]
        asks = (int(r["cpus_per_task"]), int(r["mem_mb"]), float(r["runtime"]))
        declared.setdefault(job["rule"], []).append(asks)
    submitted: dict[str, list[tuple[int, int, float]]] = {}
    for job in jobs_in(slurm_run.work, slurm_run.env):
        rule = job["Comment"].removeprefix("rule_").split("_wildcards_")[0]
        asks = (
            int(job["CPUs/Task"]),
            megabytes(job["MinMemoryNode"]),
            minutes(job["TimeLimit"]),
        )
        submitted.setdefault(rule, []).append(asks)
        assert job["JobState"] == "COMPLETED", job
    assert {k: sorted(v) for k, v in submitted.items()} == {
        k: sorted(v) for k, v in declared.items()
    }
    # The preset asks for little: every request fits this machine's one node.
    node = slurm(["sinfo", "-h", "-N", "-o", "%c %m"], slurm_run.env).split()
    for asks in (a for v in submitted.values() for a in v):
        assert asks[0] <= int(node[0]) and asks[1] <= int(node[1])
    # Accounting is off: the profile reads job states from squeue (sacct answers nothing).
    assert status_command(slurm_run.env) == "squeue"


def test_the_results_equal_a_local_run_but_for_wall_times(slurm_run, tmp_path):
    work, env = make_copy(tmp_path / "local", fake=False)
    done = snakemake(work, env, "--cores", "2", "--configfile", "config/test.yaml")
    assert done.returncode == 0, done.stderr[-4000:]
    local, on_slurm = work / "results/test", slurm_run.work / "results/test"
    compared = subprocess.run(
        [sys.executable, str(COMPARE), str(local), str(on_slurm)]
        + [f"--skip={p}" for p in (*compare_results().SKIPPED, "report/index.html")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert compared.returncode == 0, compared.stdout + compared.stderr
    # The page also quotes the pass times calibration measured (a timing of this
    # machine, different in every run): equal once they are left out.
    pages = [(d / "report/index.html").read_text() for d in (local, on_slurm)]
    assert MEASURED.sub("", pages[0]) == MEASURED.sub("", pages[1])
    assert len(MEASURED.findall(pages[0])) >= 1
    assert (slurm_run.work / "results/test/report/index.html").stat().st_size > 0
    # SLURM's own log of each job is kept (the profile keeps successful jobs' logs).
    assert list((slurm_run.work / "logs/slurm").glob("rule_train*/**/*.log"))


def compare_results():
    """scripts/compare-results.py as a module (its default patterns)."""
    spec = importlib.util.spec_from_file_location("compare_results", COMPARE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows_without_time(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIME_KEYS} for row in rows]


def long_config(work: Path, rounds: int) -> str:
    config = yaml.safe_load((work / "config/test.yaml").read_text())
    config["train"]["max_rounds"] = rounds
    (work / "config/test-long.yaml").write_text(yaml.safe_dump(config))
    return "config/test-long.yaml"


def train_alone(work: Path, config: str, into: Path) -> Path:
    """The pipeline's DiLoCo seed 0 trained again in one process at one thread, into ``into``."""
    args = [str(BIN / "adloco"), "train", "--config", config, "--run-name", "diloco"]
    args += ["--seed", "0", "--data", "data/tokenized/test-tiny"]
    args += ["--calibration", "results/test/calibration", "--base", "results/test/base"]
    args += ["--out", str(into / "out"), "--checkpoints", str(into / "ck"), "--threads", "1"]
    subprocess.run(args, cwd=work, check=True, capture_output=True, timeout=600)
    return into


def test_a_cancelled_training_job_resumes_from_its_checkpoint(slurm_run, tmp_path):
    work, env = slurm_run.work, slurm_run.env
    config = long_config(work, CANCEL_ROUNDS)
    target = "results/test/runs/diloco/seed0/summary.json"
    checkpoints = work / "results/test/checkpoints/diloco/seed0"
    shutil.rmtree(checkpoints)  # the short run's finished checkpoint: another configuration
    # The target first: after --configfile, Snakemake reads it as a second file.
    command = [target, "--workflow-profile", PROFILE, "--configfile", config]
    proc = subprocess.Popen(
        [SNAKEMAKE, *command],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 600
        while (
            len(list(checkpoints.glob("round-*"))) < 1
            or not (checkpoints / "checkpoint.json").exists()
        ):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.1)
        running = [j for j in jobs_in(work, env) if j["JobState"] == "RUNNING"]
        assert len(running) == 1, running
        slurm(["scancel", running[0]["JobId"]], env)
        out, _ = proc.communicate(timeout=PIPELINE_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    if proc.returncode != 0:  # the profile's retry failed too: the same command again
        again = snakemake(work, env, *command)
        out += again.stdout + again.stderr
        assert again.returncode == 0, out[-6000:]
    train_log = (work / "logs/test/train/diloco/seed0.log").read_text()
    assert "resuming" in train_log.lower(), train_log[-3000:]
    states = {j["JobId"]: j["JobState"] for j in jobs_in(work, env)}
    assert "CANCELLED" in states.values(), states

    # The same run uninterrupted, in one process on this machine.
    ref = train_alone(work, config, tmp_path / "ref")
    got = work / "results/test/runs/diloco/seed0"
    assert rows_without_time(got / "metrics.jsonl") == rows_without_time(ref / "out/metrics.jsonl")
    summary = json.loads((got / "summary.json").read_text())
    assert summary["rounds"] < CANCEL_ROUNDS or summary["rounds"] == CANCEL_ROUNDS
    assert (
        summary["final_val_perplexity"]
        == json.loads((ref / "out/summary.json").read_text())["final_val_perplexity"]
    )


def test_a_job_no_node_can_hold_is_refused_before_anything_is_submitted(slurm_run):
    work, env = slurm_run.work, slurm_run.env
    config = yaml.safe_load((work / "config/test.yaml").read_text())
    node_mb = int(slurm(["sinfo", "-h", "-N", "-o", "%m"], env).split()[0])
    # Simulated CPU devices live in the training job's memory: make them outgrow the node.
    config["experiment"] = "too-big"
    config["cluster"]["devices"][0]["memory_gib"] = round(node_mb / 1024, 1)
    (work / "config/too-big.yaml").write_text(yaml.safe_dump(config))
    before = {j["JobId"] for j in jobs_in(work, env)}
    done = snakemake(
        work, env, "--workflow-profile", PROFILE, "--configfile", "config/too-big.yaml", timeout=300
    )
    text = done.stdout + done.stderr
    assert done.returncode != 0, text[-3000:]
    assert "Reason=PartitionConfig" in text and f"its largest node has {node_mb}" in text, text
    assert {j["JobId"] for j in jobs_in(work, env)} == before  # nothing submitted
    assert "Traceback" not in text


TWO_TASKS = """#!/bin/bash
#SBATCH --job-name=adloco-2tasks --ntasks=2 --ntasks-per-node=2 --cpus-per-task=1
#SBATCH --mem=4000 --time=00:20:00 --output={out}/slurm-%j.out
# docs/distributed.md's SLURM recipe: one torchrun agent a task, c10d rendezvous
# on the allocation's first node; each rank one thread.
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun --kill-on-bad-exit=1 {bin}/torchrun --nnodes "$SLURM_NTASKS" --nproc_per_node 1 \\
    --rdzv-backend c10d --rdzv-endpoint "$head:{port}" --rdzv-id "$SLURM_JOB_ID" \\
    -m adloco train --config config/test.yaml --run-name diloco --seed 0 \\
    --data data/tokenized/test-tiny --calibration results/test/calibration \\
    --base results/test/base --out {out}/run --checkpoints {out}/ck --threads 1
"""


def test_two_slurm_tasks_train_like_one_process(slurm_run, tmp_path):
    import socket

    work, env = slurm_run.work, slurm_run.env
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "two-tasks.sbatch"
    script.write_text(TWO_TASKS.format(out=tmp_path, bin=BIN, port=port))
    submitted = slurm(["sbatch", "--parsable", "--wait", str(script)], env, cwd=work)
    job = submitted.strip().split(";")[0]
    log = next(tmp_path.glob("slurm-*.out")).read_text()
    shown = slurm(["scontrol", "show", "job", "-o", job], env)
    fields = dict(f.split("=", 1) for f in shown.split() if "=" in f)
    assert fields["JobState"] == "COMPLETED" and fields["NumTasks"] == "2", log[-3000:]

    # The same run in one process at one thread, on this machine.
    one = train_alone(work, "config/test.yaml", tmp_path / "one")
    got = rows_without_time(tmp_path / "run/metrics.jsonl")
    want = rows_without_time(one / "out/metrics.jsonl")
    assert len(got) == len(want) and [r.keys() for r in got] == [r.keys() for r in want]
    for row_got, row_want in zip(got, want, strict=True):
        for key, value in row_want.items():
            if isinstance(value, float):
                assert row_got[key] == pytest.approx(value, rel=REL_TOL, abs=ABS_TOL), key
            else:
                assert row_got[key] == value, key
    # Both ranks took part: each round's checkpoint holds a file per rank.
    last = sorted((tmp_path / "ck").glob("round-*"))[-1]
    assert sorted(p.name for p in last.glob("rank-*.pt")) == ["rank-00000.pt", "rank-00001.pt"]


def job_state(job: str, env: dict[str, str]) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True
    )
    return out.stdout.strip()


def test_the_cluster_is_private_and_stop_cancels_its_own_jobs_only(cluster):
    # Nothing at the machine's default paths that was not there before it started.
    assert {p: p.exists() for p in cluster.before} == cluster.before
    assert not SYSTEM_CONF.is_symlink()
    shown = slurm(["scontrol", "show", "config"], cluster.env)
    socket_line = rf"^AuthInfo\s*=\s*socket={re.escape(str(cluster.root))}/munge/munge.socket.2$"
    assert re.search(socket_line, shown, re.M), shown
    # A client without the cluster's SLURM_CONF does not reach it.
    env = {k: v for k, v in cluster.env.items() if k != "SLURM_CONF"}
    other = subprocess.run(["scontrol", "show", "config"], env=env, capture_output=True, text=True)
    assert "adloco-test" not in other.stdout

    # A second cluster beside it: a job in each, then the second one stopped.
    second, second_env = start_cluster("adloco-slurm-second-")
    try:
        sleep = [
            "sbatch",
            "--parsable",
            "--mem=100",
            "-c1",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 600",
        ]
        mine = slurm(sleep, cluster.env).strip()
        theirs = slurm(sleep, second_env).strip()
        for job, env in ((mine, cluster.env), (theirs, second_env)):
            deadline = time.monotonic() + 60
            while job_state(job, env) != "RUNNING":
                assert time.monotonic() < deadline, job_state(job, env)
                time.sleep(0.5)
        subprocess.run(
            [sys.executable, str(CLUSTER), "stop", "--dir", str(second)], timeout=120, check=True
        )
        assert job_state(mine, cluster.env) == "RUNNING"
        # The second cluster's controller is gone; this one's still answers.
        gone = subprocess.run(["sinfo"], env=second_env, capture_output=True, timeout=60)
        assert gone.returncode != 0
        slurm(["scancel", mine], cluster.env)
    finally:
        stop_cluster(second)
