"""The torch.distributed backend: real gloo processes on loopback against the single process.

Launches go through torchrun (``python -m torch.distributed.run --standalone``,
which picks a free port) or, to see what the ranks themselves do when a peer
dies, through two plain processes given torchrun's environment. Every launch
trains a tiny model for a few rounds, so the module stays within a minute on
two cores.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from array_data import FULL_STATE_RUN, TINY_CLUSTER, TINY_MODEL, assert_close, child_pythonpath

from adloco.config import section
from adloco.engine import checkpoint, distributed
from adloco.engine.trainers import build_slots

HERE = Path(__file__).parent

# Tolerance of the 2-rank run against the single process. Each rank first sums
# its own slots' contributions, then the ranks' partial sums are added: float
# addition in another order wherever a trainer has two or more slots on one rank
# and more on the other (here the statistics' pooled gradient every round, and
# the pseudo-gradient once one trainer is left on all 4 slots). Measured on this
# config: weights within 1e-9 (69 of 7408 differ), statistics within 3e-7
# relative, losses equal.
REL_TOL = 1e-5
ABS_TOL = 1e-7

TRAIN = {
    "max_rounds": 8,
    "inner_steps": 2,
    "inner_lr": 0.01,
    "warmup_fraction": 0.1,
    "max_tokens": 10**6,
    "eval_sequences": 8,
    "eval_batch": 8,
}


def make_config(seq_len: int, **train) -> dict:
    return {
        "experiment": "distributed",
        "seed": 0,
        "data": {"dataset": "tiny", "source": "local", "seq_len_tokens": seq_len},
        "model": TINY_MODEL,
        "cluster": TINY_CLUSTER,
        "train": {**TRAIN, **train},
        "runs": {"r": FULL_STATE_RUN},
    }


def child_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in distributed.LAUNCH_KEYS}
    return {**env, "PYTHONPATH": child_pythonpath(), "OMP_NUM_THREADS": "1", **extra}


def torchrun(args: list[str], log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    with open(log, "wb") as fh:
        # A new session, so that a test can kill the launcher and its ranks together.
        return subprocess.Popen(
            cmd + args,
            env=child_env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def calibrate(config: Path, data: Path) -> None:
    """The calibration files (max batch fixed, step times measured) beside ``config``."""
    from adloco import cli

    threads = torch.get_num_threads()
    try:
        for device in yaml.safe_load(config.read_text())["cluster"]["devices"]:
            out = config.parent / "calibration" / f"{device['name']}.json"
            args = ["calibrate", "--config", str(config), "--data", str(data)]
            assert cli.main([*args, "--device", device["name"], "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)


def train_args(config: Path, data: Path, out: Path, ckpt: Path) -> list[str]:
    return [
        "train",
        "--config",
        str(config),
        "--run-name",  # torchrun rejects --run (see adloco.stages.train)
        "r",
        "--seed",
        "0",
        "--data",
        str(data),
        "--calibration",
        str(config.parent / "calibration"),
        "--out",
        str(out),
        "--checkpoints",
        str(ckpt),
        "--no-progress",
        "--threads",
        "1",
    ]


def child_processes(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text[text.rfind(")") + 2 :].split()[1]) == pid:
            children.append(int(stat.parent.name))
    return children


def rows_without_wall_time(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for r in rows:
        r.pop("wall_time_s")
    return rows


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(out / "final" / "model.safetensors")


# ------------------------------------------------------------------ pure functions
def test_slot_owners_follow_devices_round_robin():
    cluster = section(
        "cluster",
        {
            "nodes_per_device": 2,
            "devices": [
                {"name": "a", "count": 2, "memory_gib": 1.0, "max_batch": 4},
                {"name": "b", "count": 1, "memory_gib": 1.0, "max_batch": 2},
            ],
        },
    )
    owners = distributed.slot_owners(cluster, 2)
    assert owners == [0, 0, 1, 1, 0, 0]
    # Same numbering as the engine's slots: the two slots of each device share a rank.
    slots = build_slots(cluster, {"a": 4, "b": 2})
    assert [s.device for s in slots] == ["a", "a", "a", "a", "b", "b"]
    for s in slots:
        assert owners[s.index] == (s.index // 2) % 2
    assert distributed.slot_owners(cluster, 3) == [0, 0, 1, 1, 2, 2]
    assert distributed.slot_owners(cluster, 1) == [0] * 6
    with pytest.raises(ValueError, match="launch at most 3"):
        distributed.slot_owners(cluster, 4)


def test_launch_environment_and_timeout():
    assert distributed.launch_env({}) is None
    env = distributed.launch_env({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"})
    assert (env.rank, env.world_size, env.local_rank) == (3, 4, 1)
    with pytest.raises(ValueError, match="LOCAL_RANK not set"):
        distributed.launch_env({"WORLD_SIZE": "2", "RANK": "0"})
    with pytest.raises(ValueError, match="inconsistent"):
        distributed.launch_env({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0"})
    assert distributed.timeout_s(None, {}) == distributed.DEFAULT_TIMEOUT_S
    assert distributed.timeout_s(None, {distributed.TIMEOUT_ENV: "12.5"}) == 12.5
    assert distributed.timeout_s(3, {distributed.TIMEOUT_ENV: "12.5"}) == 3.0
    with pytest.raises(ValueError, match=distributed.TIMEOUT_ENV):
        distributed.timeout_s(None, {distributed.TIMEOUT_ENV: "soon"})


# ------------------------------------------------------------------ checkpoint protocol
def _local(rank: int, slots: list[int]) -> dict:
    return {
        "nodes": [
            {
                "slot": s,
                "inner_state": [{"step": torch.tensor(5.0), "exp_avg": torch.full((2,), float(s))}],
            }
            for s in slots
        ],
        "rng": torch.full((4,), rank, dtype=torch.uint8),
    }


def _save_round(directory: Path, round_: int, ranks: list[int], barrier=lambda: None) -> None:
    """Save as the ranks of a 2-process run would, rank 1 first (rank 0 commits)."""
    for rank in ranks:
        checkpoint.save(
            directory,
            round_,
            "fp",
            {"round": round_} if rank == 0 else None,
            _local(rank, [2 * rank, 2 * rank + 1]),
            rank,
            2,
            barrier,
        )


class Killed(Exception):
    pass


def _die():
    raise Killed


def test_checkpoint_keeps_last_complete_round_when_a_save_is_cut(tmp_path):
    _save_round(tmp_path, 1, [1, 0])
    # Round 2: rank 1 saved its file and waits at the barrier when the job is killed.
    with pytest.raises(Killed):
        _save_round(tmp_path, 2, [1], barrier=_die)
    # Round 2 again: rank 0 wrote shared.pt and was killed at the barrier as well.
    with pytest.raises(Killed):
        _save_round(tmp_path, 2, [0], barrier=_die)
    saved = checkpoint.load(tmp_path, "fp")
    assert saved.round == 1 and saved.shared["round"] == 1
    assert (tmp_path / "round-000002" / "shared.pt").exists()
    # Each rank takes its own slots and RNG; under one process, rank 0 takes every slot.
    own = saved.local(1, lambda s: s in (2, 3))
    assert sorted(own["nodes"]) == [2, 3] and own["rng"].tolist() == [1] * 4
    assert own["nodes"][3][0]["exp_avg"].tolist() == [3.0, 3.0]
    everything = saved.local(0, lambda s: True)
    assert sorted(everything["nodes"]) == [0, 1, 2, 3] and everything["rng"].tolist() == [0] * 4
    # Completing round 2 commits it and keeps round 1 as the previous complete round;
    # completing round 3 removes round 1.
    _save_round(tmp_path, 2, [1, 0])
    assert checkpoint.load(tmp_path, "fp").round == 2
    assert sorted(p.name for p in tmp_path.glob("round-*")) == ["round-000001", "round-000002"]
    _save_round(tmp_path, 3, [1, 0])
    assert sorted(p.name for p in tmp_path.glob("round-*")) == ["round-000002", "round-000003"]
    with pytest.raises(ValueError, match="different configuration"):
        checkpoint.load(tmp_path, "other")


def test_checkpoint_names_a_file_another_machine_cannot_see(tmp_path):
    _save_round(tmp_path, 1, [1, 0])
    (tmp_path / "round-000001" / "rank-00001.pt").unlink()
    with pytest.raises(FileNotFoundError, match="rank-00001.pt"):
        checkpoint.load(tmp_path, "fp")


# ------------------------------------------------------------------ real processes
@pytest.mark.torchrun
def test_collectives_against_one_process(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(make_config(12)))
    proc = torchrun(
        [str(HERE / "distributed_worker.py"), str(config), str(tmp_path)], tmp_path / "log"
    )
    assert proc.wait(timeout=120) == 0, (tmp_path / "log").read_text()
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for res in results:
        assert "error" not in res, res["error"]
    assert [r["owned"] for r in results] == [[0, 1], [2, 3]]
    for name, case in results[0]["stats"].items():
        got, want = case["got"], case["want"]
        assert (got["groups"], got["samples"]) == (want["groups"], want["samples"]), name
        for key in ("sum_n_sqnorm", "pooled_sum_sqnorm", "sum_n_proj", "sum_n_proj_sq"):
            if want[key] is None:
                assert got[key] is None, (name, key)
            else:
                assert got[key] == pytest.approx(want[key], rel=1e-6), (name, key)
        assert case["pooled_gap"] < 1e-5, name
        assert case["trace_cov"] == pytest.approx(case["want_trace_cov"], rel=1e-5), name
        # Both ranks hold the same statistics afterwards.
        assert results[1]["stats"][name]["got"] == got, name
    for res in results:
        assert res["sums"]["a"] == [[3.0] * 3] * 2
        assert res["sums"]["b"] == [0.75] and res["sums"]["b_dtype"] == "torch.float64"
        assert res["sums"]["c"] == [0.0, 3.0, 6.0, 9.0]
        assert "disagree" in res["flip_error"]
    assert "did not answer within the 2 s" in results[0]["timeout_error"]
    assert "Timed out" in results[0]["timeout_error"]


@pytest.fixture(scope="module")
def cli_case(tmp_path_factory, tiny_tokenized):
    """The tiny tokenized data, a config for it, and one uninterrupted 2-rank run."""
    from adloco.data.reader import TokenData

    root = tmp_path_factory.mktemp("distributed")
    seq_len = TokenData.open(tiny_tokenized).seq_len_tokens
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(make_config(seq_len)))
    calibrate(config, tiny_tokenized)
    out, ckpt = root / "two" / "out", root / "two" / "ckpt"
    proc = torchrun(["-m", "adloco", *train_args(config, tiny_tokenized, out, ckpt)], root / "log")
    assert proc.wait(timeout=180) == 0, (root / "log").read_text()
    return {"root": root, "config": config, "data": tiny_tokenized, "out": out, "ckpt": ckpt}


@pytest.mark.torchrun
def test_two_ranks_match_the_single_process_engine(cli_case):
    from adloco import cli

    out = cli_case["root"] / "one" / "out"
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        args = train_args(cli_case["config"], cli_case["data"], out, out.parent / "ckpt")
        assert cli.main(args) == 0
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    one = rows_without_wall_time(out / "metrics.jsonl")
    two = rows_without_wall_time(cli_case["out"] / "metrics.jsonl")
    assert len(one) > TRAIN["max_rounds"]  # several trainers per round
    events = {e["type"] for r in one for e in r["events"]}
    assert {"merge", "batch_change"} <= events
    assert any(r["switch_mode"] == "accumulate" for r in one)
    assert_close(one, two, REL_TOL, ABS_TOL, "metrics")
    a, b = final_weights(out), final_weights(cli_case["out"])
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=REL_TOL, atol=ABS_TOL)
    # Only rank 0 wrote: one row per trainer and round, and nothing from rank 1.
    summary = json.loads((cli_case["out"] / "summary.json").read_text())
    assert summary["rounds"] == TRAIN["max_rounds"] and summary["final_trainer"] is not None
    names = sorted(p.name for p in (cli_case["ckpt"] / "round-000008").iterdir())
    assert names == [
        "rank-00000.pt",
        "rank-00000.pt.sha256",
        "rank-00001.pt",
        "rank-00001.pt.sha256",
        "shared.pt",
        "shared.pt.sha256",
    ]


@pytest.mark.torchrun
@pytest.mark.reliability("kills")
def test_killed_two_rank_run_resumes_to_the_same_metrics(cli_case):
    root = cli_case["root"] / "killed"
    out, ckpt = root / "out", root / "ckpt"
    args = ["-m", "adloco", *train_args(cli_case["config"], cli_case["data"], out, ckpt)]
    victim = torchrun(args, root.with_suffix(".log1"))
    metrics = ckpt / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and victim.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 7:  # round 3 or later
            break
        time.sleep(0.01)
    # The launcher and both ranks, like a lost job. torchrun starts each rank in
    # a session of its own, so killing the launcher's group alone would leave
    # the ranks running to the end (and the resumed job would find a finished run).
    ranks = child_processes(victim.pid)
    assert len(ranks) == 2, ranks
    os.killpg(victim.pid, signal.SIGKILL)
    for pid in ranks:
        os.kill(pid, signal.SIGKILL)
    victim.wait()
    assert not (out / "summary.json").exists(), "the run finished before it could be killed"
    killed_round = json.loads((ckpt / "checkpoint.json").read_text())["round"]
    assert 1 <= killed_round < TRAIN["max_rounds"]

    log = root.with_suffix(".log2")
    resumed = torchrun(args, log)
    assert resumed.wait(timeout=180) == 0, log.read_text()
    assert "resuming" in log.read_text()
    assert rows_without_wall_time(out / "metrics.jsonl") == rows_without_wall_time(
        cli_case["out"] / "metrics.jsonl"
    )
    a, b = final_weights(cli_case["out"]), final_weights(out)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def long_run(cli_case, name: str) -> tuple[Path, Path]:
    """A folder ``name`` and in it the test's configuration with rounds to spare, calibrated."""
    root = cli_case["root"] / name
    root.mkdir()
    config = root / "config.yaml"
    settings = copy.deepcopy(yaml.safe_load(cli_case["config"].read_text()))
    settings["train"]["max_rounds"] = 10_000
    config.write_text(yaml.safe_dump(settings))
    calibrate(config, cli_case["data"])
    return root, config


@pytest.mark.torchrun
def test_a_dead_rank_makes_the_others_fail_clearly(cli_case):
    root, config = long_run(cli_case, "dead")
    timeout_s = 20
    port = str(_free_port())
    args = train_args(config, cli_case["data"], root / "out", root / "ckpt")
    args += ["--dist-timeout-s", str(timeout_s)]
    ranks = []
    for rank in (0, 1):
        env = child_env(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            WORLD_SIZE="2",
            RANK=str(rank),
            LOCAL_RANK=str(rank),
        )
        with open(root / f"rank{rank}.log", "wb") as fh:
            ranks.append(
                subprocess.Popen(
                    [sys.executable, "-m", "adloco", *args],
                    env=env,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                )
            )
    metrics = root / "ckpt" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and metrics.read_text()):
        time.sleep(0.02)
    assert ranks[0].poll() is None, (root / "rank0.log").read_text()
    ranks[1].send_signal(signal.SIGKILL)
    ranks[1].wait()
    try:
        # A hang guard, not a speed test: the survivor must give up on its own.
        code = ranks[0].wait(timeout=timeout_s + 60)
    except subprocess.TimeoutExpired:
        ranks[0].kill()
        pytest.fail("rank 0 still waits for the dead rank")
    log = (root / "rank0.log").read_text()
    assert code != 0
    assert "rank 0 of 2" in log and "another process died" in log, log


def train_two_ranks_and_one(config: Path, data: Path, root: Path) -> tuple[Path, Path]:
    """Train ``config``'s run r on two ranks (torchrun) and in one process; their out folders."""
    from adloco import cli

    calibrate(config, data)
    two = root / "two"
    proc = torchrun(
        ["-m", "adloco", *train_args(config, data, two / "out", two / "ckpt")], root / "log"
    )
    assert proc.wait(timeout=180) == 0, (root / "log").read_text()
    one = root / "one"
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        assert cli.main(train_args(config, data, one / "out", one / "ckpt")) == 0
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
    return one / "out", two / "out"


def assert_same_run(one: Path, two: Path) -> list[dict]:
    """Metrics and final weights of two runs within REL_TOL/ABS_TOL; the first's rows."""
    rows = rows_without_wall_time(one / "metrics.jsonl")
    assert_close(rows, rows_without_wall_time(two / "metrics.jsonl"), REL_TOL, ABS_TOL, "metrics")
    a, b = final_weights(one), final_weights(two)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=REL_TOL, atol=ABS_TOL)
    return rows


@pytest.mark.torchrun
def test_a_ddp_run_on_two_ranks_matches_one_process(tmp_path, tiny_tokenized):
    """ddp all-reduces the gradient at every step; two ranks hold two slots each."""
    from adloco.data.reader import TokenData

    seq_len = TokenData.open(tiny_tokenized).seq_len_tokens
    cfg = make_config(seq_len, max_rounds=3)
    cfg["runs"] = {"r": {"method": "ddp", "initial_batch": 2}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    rows = assert_same_run(*train_two_ranks_and_one(config, tiny_tokenized, tmp_path))
    assert [r["communications"] for r in rows] == [2, 4, 6]


@pytest.mark.torchrun
def test_a_vectorized_run_on_two_ranks_matches_one_process(tmp_path, tiny_tokenized):
    """Each rank stacks the slots it owns; one process stacks all of a trainer's slots."""
    from adloco.data.reader import TokenData

    seq_len = TokenData.open(tiny_tokenized).seq_len_tokens
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(make_config(seq_len, max_rounds=5, slot_execution="vectorized"))
    )
    rows = assert_same_run(*train_two_ranks_and_one(config, tiny_tokenized, tmp_path))
    events = {e["type"] for r in rows for e in r["events"]}
    assert {"merge", "batch_change"} <= events  # trainers of several slots, on both ranks


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper is not)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2] != "Z"


@pytest.mark.torchrun
@pytest.mark.reliability("kills")
def test_no_rank_outlives_its_killed_job(cli_case):
    # A Snakemake job (its shell, torchrun) killed with its process group, as
    # Ctrl-C or a cluster's cancel does: torchrun's ranks run in sessions of
    # their own, so the signal never reaches them; they must stop by themselves.
    root, config = long_run(cli_case, "job")
    args = ["-m", "adloco", *train_args(config, cli_case["data"], root / "out", root / "ckpt")]
    job = torchrun(args, root / "log")
    metrics = root / "ckpt" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and metrics.read_text()):
        time.sleep(0.05)
    ranks = child_processes(job.pid)
    assert len(ranks) == 2 and all(map(_running, ranks)), (root / "log").read_text()
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    deadline = time.time() + 15
    while time.time() < deadline and any(map(_running, ranks)):
        time.sleep(0.1)
    survivors = [pid for pid in ranks if _running(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors, "ranks outlived their job"
    assert "the launcher (pid" in (root / "log").read_text()
