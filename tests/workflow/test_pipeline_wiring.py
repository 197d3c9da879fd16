"""The workflow wiring run for real, with a stand-in for the `adloco` command.

A small script put first on PATH parses its arguments with the real
``adloco`` parser (so a rule passing an argument the CLI lacks fails) and
writes each stage's outputs as the design describes them, in a copy of the
repository. This checks what a dry run cannot: every declared output appears
where the command writes it, logs and benchmarks are written, the default
profile keeps GPU jobs one at a time, `dvc repro`/`push`/`pull` work on
dvc.yaml, and after `dvc pull` Snakemake's `--touch` marks the pulled files
up to date instead of re-running them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_snakemake import ROOT, SNAKEMAKE, parse_dry_run

from adloco.core.paths import REPORT_FIGURE_NAMES
from adloco.dvc.params import params_text

BIN = Path(sys.executable).parent
DVC = str(BIN / "dvc")

FAKE_ADLOCO = """#!{python}
import json, os, sys, time
from pathlib import Path

from adloco.cli import build_parser
from adloco.core.io import write_manifest

args = build_parser().parse_args(sys.argv[1:])
stage = args.stage
record = {{"stage": stage, "argv": sys.argv[1:]}}
if stage in ("calibrate", "variance", "pretrain", "train"):
    # Jobs that would hold the GPU: how many of them run at once.
    running = Path(os.environ["FAKE_ADLOCO_RUNNING"])
    running.mkdir(parents=True, exist_ok=True)
    mine = running / str(os.getpid())
    mine.touch()
    time.sleep(float(os.environ.get("FAKE_ADLOCO_SLEEP_S", "0")))
    record["concurrent"] = len(list(running.iterdir()))
    mine.unlink()
with open(os.environ["FAKE_ADLOCO_RECORD"], "a") as fh:
    fh.write(json.dumps(record) + "\\n")
if stage in ("prepare-corpus", "tokenize", "variance", "pretrain", "train", "report"):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
if stage == "prepare-corpus":
    (out / "c4-train.00000-of-00001.json.gz").write_bytes(b"records")
elif stage == "tokenize":
    (out / "train-00000.bin").write_bytes(b"\\0" * 64)
    (out / "manifest.json").write_text(json.dumps({{"format_version": 1}}))
elif stage == "calibrate":
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({{"device": args.device, "max_batch": 8}}))
elif stage == "variance":
    (out / "variance.json").write_text(json.dumps({{"trace_cov": 2.0, "b_simple": 4.0}}))
    (out / "per_batch.csv").write_text("batch,deviation\\n0,1.5\\n")
    (out / "draws.csv").write_text("draw,trace_cov_pooled\\n")
    (out / "deviations.png").write_bytes(b"png")
elif stage == "pretrain":
    Path(args.checkpoints).mkdir(parents=True, exist_ok=True)
    (Path(args.checkpoints) / "step-000001.pt").write_bytes(b"state")
    (out / "base.json").write_text(json.dumps({{"model_dir": "model", "val_perplexity": 20.0}}))
    (out / "metrics.jsonl").write_text(json.dumps({{"step": 1, "val_perplexity": 20.0}}) + "\\n")
elif stage == "train":
    from adloco.config import load_config

    if args.seed == "all":  # DVC's stage per run: seed<seed>/ of --out and --checkpoints
        seeds = load_config(args.config).run_seeds(args.run)
        todo = [(s, out / f"seed{{s}}", Path(args.checkpoints) / f"seed{{s}}") for s in seeds]
    else:
        todo = [(int(args.seed), out, Path(args.checkpoints))]
    for seed, folder, ckpt in todo:
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "round-00001.pt").write_bytes(b"state")
        folder.mkdir(parents=True, exist_ok=True)
        row = {{"run": args.run, "seed": seed, "round": 1, "tokens_total": 1000,
               "val_perplexity": 12.5}}
        (folder / "metrics.jsonl").write_text(json.dumps(row) + "\\n")
        (folder / "summary.json").write_text(json.dumps({{"run": args.run, "seed": seed,
                                                         "final_val_perplexity": 12.5}}))
        (folder / "final").mkdir(exist_ok=True)
        (folder / "final" / "config.json").write_text("{{}}")
        # As adloco.core.io.atomic_dir does: each folder lists the files adloco wrote.
        write_manifest(folder / "final", "adloco train")
        write_manifest(folder, "adloco train")
elif stage == "report":
    (out / "index.html").write_text("<html></html>")
    (out / "summary.csv").write_text("run,seed,final_val_perplexity\\ndiloco,0,12.5\\n")
    (out / "curves.csv").write_text("run,seed,round,tokens_total,val_perplexity\\n"
                                   "diloco,0,1,1000,12.5\\n")
    (out / "claims.json").write_text(json.dumps({{"target_perplexity": 12.5}}))
    (out / "ladder.csv").write_text("target_perplexity,run\\n12.5,diloco\\n")
    (out / "regimes.csv").write_text("clock,bandwidth_gbit_s\\nmeasured,1.0\\n")
    (out / "noise_scale.csv").write_text("run,seed,round,noise_scale\\nadloco,0,1,12.0\\n")
    (out / "figures").mkdir(exist_ok=True)
    for name in {figures!r}:  # every figure dvc.yaml names (adloco.core.paths)
        (out / "figures" / f"{{name}}.png").write_bytes(b"png")
    (out / "metrics.json").write_text(json.dumps({{"target": 12.5, "ppl": {{"diloco": 12.5}}}}))
    (out / "median_curves.csv").write_text("run,round,seeds,tokens_total,sim_time_s,"
                                           "val_perplexity\\ndiloco,1,1,1000,1.0,12.5\\n")
if stage in ("prepare-corpus", "tokenize", "variance", "pretrain", "report"):
    write_manifest(out, f"adloco {{stage}}")  # as adloco.core.io.atomic_dir does
"""


def make_copy(
    tmp_path: Path, config: dict | None = None, fake: bool = True
) -> tuple[Path, dict[str, str]]:
    """A copy of the workflow files; with ``fake``, the stand-in `adloco` first on PATH."""
    work = tmp_path / "repo"
    work.mkdir(parents=True)
    for name in ("Snakefile", "dvc.yaml", ".gitignore", ".dvcignore"):
        shutil.copy2(ROOT / name, work / name)
    for name in ("workflow", "profiles", "config", "src/adloco/schemas"):
        shutil.copytree(ROOT / name, work / name, symlinks=True)
    if config is not None:
        (work / "config/config.yaml").write_text(yaml.safe_dump(config))
    # dvc.yaml reads params.yaml, config/config.yaml's copy for DVC (adloco dvc-params).
    (work / "params.yaml").write_text(params_text(work / "config/config.yaml"))
    # No usage reports from the dvc commands of the tests.
    base_env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    if not fake:
        return work, {**base_env, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "adloco"
    fake.write_text(FAKE_ADLOCO.format(python=sys.executable, figures=REPORT_FIGURE_NAMES))
    fake.chmod(0o755)
    env = {
        **base_env,
        "PATH": f"{fake_bin}{os.pathsep}{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "FAKE_ADLOCO_RECORD": str(tmp_path / "calls.jsonl"),
        "FAKE_ADLOCO_RUNNING": str(tmp_path / "running"),
    }
    return work, env


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"{cmd}\n{result.stdout}\n{result.stderr}"
    return result


def calls(env: dict[str, str]) -> list[dict]:
    path = Path(env["FAKE_ADLOCO_RECORD"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def tiny_config() -> dict:
    return yaml.safe_load((ROOT / "config/test.yaml").read_text())


def cuda_config() -> dict:
    config = tiny_config()
    config["cluster"]["devices"][0]["kind"] = "cuda"
    config["runs"]["adloco-no-merge"] = {"method": "adloco", "initial_trainers": 2}
    return config


def outputs_of(config: dict) -> list[str]:
    """Every file the configuration's pipeline writes, spelled out (not from adloco.core.paths)."""
    dataset = config["data"]["dataset"]
    exp = f"results/{config['experiment']}"
    files = [config["data"]["raw_dir"], f"data/tokenized/{dataset}/manifest.json"]
    files += [f"{exp}/calibration/{d['name']}.json" for d in config["cluster"]["devices"]]
    files += [f"{exp}/variance/{n}" for n in ("variance.json", "per_batch.csv", "deviations.png")]
    if config["model"]["source"] == "base":
        files += [f"{exp}/base/{n}" for n in ("base.json", "metrics.jsonl")]
        files.append(f"{exp}/checkpoints/base/step-000001.pt")
    for run_name in config["runs"]:
        for seed in config["runs"][run_name].get("seeds", config["seeds"]):
            folder = f"{exp}/runs/{run_name}/seed{seed}"
            files += [f"{folder}/{n}" for n in ("metrics.jsonl", "summary.json", "final")]
            files.append(f"{exp}/checkpoints/{run_name}/seed{seed}/round-00001.pt")
    files += [f"{exp}/report/{n}" for n in ("index.html", "summary.csv", "claims.json")]
    return files


def kill_snakemake_while_a_job_runs(work: Path, env: dict[str, str], check_lock=False) -> None:
    """``snakemake --cores 2`` killed with its jobs (kill -9) once a stand-in job sleeps.

    Jobs sleep 20 s, so the kill comes while one runs; they sleep no more after.
    """
    env["FAKE_ADLOCO_SLEEP_S"] = "20"
    victim = subprocess.Popen(
        [SNAKEMAKE, "--cores", "2"],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    running = Path(env["FAKE_ADLOCO_RUNNING"])
    deadline = time.time() + 120
    while time.time() < deadline and not (running.is_dir() and any(running.iterdir())):
        time.sleep(0.1)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    if check_lock:
        assert list((work / ".snakemake/locks").glob("*.lock")), "the kill left no lock"
    shutil.rmtree(running)
    env["FAKE_ADLOCO_SLEEP_S"] = "0"


@pytest.mark.slow
def test_snakemake_writes_every_output_log_and_benchmark(tmp_path):
    config = tiny_config()
    work, env = make_copy(tmp_path, config)
    run([SNAKEMAKE, "--cores", "2"], work, env)
    missing = [p for p in outputs_of(config) if not (work / p).exists()]
    assert not missing
    stages = sorted(c["stage"] for c in calls(env))
    assert config["model"]["source"] == "base" and config["seeds"] == [0]
    jobs = 1 + 1 + len(config["cluster"]["devices"]) + 1 + 1 + len(config["runs"]) + 1
    assert len(stages) == jobs
    logs = sorted(str(p.relative_to(work)) for p in (work / "logs").rglob("*.log"))
    assert len(logs) == jobs
    benchmarks = list((work / "logs").rglob("*.tsv"))
    assert len(benchmarks) == jobs - 2  # all but prepare-corpus and report
    again = run([SNAKEMAKE, "-n"], work, env)
    assert "Nothing to be done" in again.stdout + again.stderr
    # Snakemake's own report collects the annotated outputs with their captions.
    run([SNAKEMAKE, "--report", "results/report.html"], work, env)
    page = (work / "results/report.html").read_text()
    assert "Report" in page and "summary.csv" in page and "metrics.jsonl" in page


@pytest.mark.slow
def test_a_job_per_run_trains_its_seeds_and_the_same_command_finishes_it_after_a_kill(tmp_path):
    # snakemake.train_jobs: run (config/config.yaml's choice): one `adloco train
    # --seed all` per run writes every seed folder; killed while training, the
    # same command runs it again and leaves nothing to do.
    config = tiny_config()
    config["seeds"] = [0, 1]
    only = next(iter(config["runs"]))
    config["runs"][only]["seeds"] = [4]
    config["snakemake"] = {"train_jobs": "run"}
    work, env = make_copy(tmp_path, config)
    before_training = ["prepare_corpus", "tokenize", "calibrate", "pretrain", "variance"]
    run([SNAKEMAKE, "--cores", "2", "--until", *before_training], work, env)
    assert not [c for c in calls(env) if c["stage"] == "train"]

    kill_snakemake_while_a_job_runs(work, env)
    run([SNAKEMAKE, "--cores", "2"], work, env)
    trains = [c["argv"] for c in calls(env) if c["stage"] == "train" and "concurrent" in c]
    finished = {argv[argv.index("--run-name") + 1] for argv in trains}
    assert finished == set(config["runs"])
    assert all(argv[argv.index("--seed") + 1] == "all" for argv in trains)
    assert not [p for p in outputs_of(config) if not (work / p).exists()]
    exp = work / "logs" / config["experiment"]
    assert sorted(p.name for p in (exp / "train").iterdir()) == sorted(
        f"{name}.log" for name in config["runs"]
    )
    assert sorted(p.name for p in (exp / "benchmarks/train").iterdir()) == sorted(
        f"{name}.tsv" for name in config["runs"]
    )
    assert "Nothing to be done" in run([SNAKEMAKE, "-n"], work, env).stdout


@pytest.mark.slow
def test_default_profile_runs_gpu_jobs_one_at_a_time(tmp_path):
    # The CUDA config gives 1 calibration, 1 pretraining, 1 variance and 3
    # training jobs, each asking for a GPU; 8 cores would let several run together.
    with_profile, env = make_copy(tmp_path / "with", cuda_config())
    env["FAKE_ADLOCO_SLEEP_S"] = "0.5"
    run([SNAKEMAKE, "--cores", "8"], with_profile, env)
    concurrent = [c["concurrent"] for c in calls(env) if "concurrent" in c]
    assert len(concurrent) == 6
    assert max(concurrent) == 1
    # The same run without the profile overlaps them: the limit is the profile's.
    without, env = make_copy(tmp_path / "without", cuda_config())
    env["FAKE_ADLOCO_SLEEP_S"] = "0.5"
    run([SNAKEMAKE, "--cores", "8", "--workflow-profile", "none"], without, env)
    assert max(c["concurrent"] for c in calls(env) if "concurrent" in c) > 1


@pytest.mark.slow
def test_dvc_repro_push_pull_then_snakemake_touch_is_up_to_date(tmp_path):
    config = tiny_config()
    work, env = make_copy(tmp_path, config)
    store = tmp_path / "store"
    run(["git", "init", "-q"], work, env)
    run([DVC, "init", "-q"], work, env)
    run([DVC, "remote", "add", "-d", "local", str(store)], work, env)
    run([DVC, "repro"], work, env)
    commands_run = len(calls(env))
    # One stage per run, however many seeds (the test preset has one).
    assert commands_run == 1 + 1 + 1 + 1 + 1 + len(config["runs"]) + 1
    assert not [p for p in outputs_of(config) if not (work / p).exists()]
    status = run([DVC, "status"], work, env)
    assert "up to date" in status.stdout
    metrics = run([DVC, "metrics", "show"], work, env)
    assert "12.5" in metrics.stdout  # the target of metrics.json
    run([DVC, "push"], work, env)
    # What a DVC user commits: dvc.lock and the files DVC keeps in git (cache: false).
    run(["git", "add", "-A"], work, env)
    identity = ["-c", "user.name=tests", "-c", "user.email=tests@adloco.invalid"]
    run(["git", *identity, "commit", "-q", "-m", "run"], work, env)

    # A fresh clone: no outputs, no Snakemake metadata, then `dvc pull`.
    for folder in ("data", "results", ".snakemake"):
        shutil.rmtree(work / folder, ignore_errors=True)
    run(["git", "checkout", "--", "."], work, env)  # the committed files of a clone
    run([DVC, "pull"], work, env)
    assert not [p for p in outputs_of(config) if not (work / p).exists()]
    # Pulled files get arbitrary times; make the tokenized data the newest.
    os.utime(work / f"data/tokenized/{config['data']['dataset']}/manifest.json")
    stale = run([SNAKEMAKE, "-n"], work, env)
    assert "rule train:" in stale.stdout + stale.stderr
    run([SNAKEMAKE, "--touch", "--cores", "1"], work, env)
    fresh = run([SNAKEMAKE, "-n"], work, env)
    assert "Nothing to be done" in fresh.stdout + fresh.stderr
    assert len(calls(env)) == commands_run  # nothing was re-run


@pytest.mark.slow
def test_the_same_command_resumes_after_snakemake_is_killed(tmp_path):
    # kill -9 of Snakemake and its jobs leaves .snakemake/locks behind; the
    # README's command must run again without `--unlock`, since no process
    # can hold that lock any more.
    config = tiny_config()
    work, env = make_copy(tmp_path, config)
    kill_snakemake_while_a_job_runs(work, env, check_lock=True)
    again = run([SNAKEMAKE, "--cores", "2"], work, env)
    assert "removed the lock a killed Snakemake left" in again.stderr
    assert not [p for p in outputs_of(config) if not (work / p).exists()]
    assert "Nothing to be done" in run([SNAKEMAKE, "-n"], work, env).stdout


@pytest.mark.slow
def test_a_copy_of_the_config_under_another_name_reruns_nothing(tmp_path):
    # The jobs read the file they are given, but what they compute depends on
    # its settings, not on its name (nor on the order of its keys).
    config = tiny_config()
    work, env = make_copy(tmp_path, config)
    (work / "config/mine.yaml").write_text((ROOT / "config/test.yaml").read_text())
    run([SNAKEMAKE, "--cores", "2", "--configfile", "config/mine.yaml"], work, env)
    before = len(calls(env))
    # yaml.safe_dump sorts the keys: the same settings in another order.
    (work / "config/copy of mine.yaml").write_text(yaml.safe_dump(config))
    again = run([SNAKEMAKE, "-n", "--configfile", "config/copy of mine.yaml"], work, env)
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout
    # A changed tokenization setting re-runs tokenization and what follows, not the corpus.
    config["data"]["seq_len_tokens"] = 64
    (work / "config/longer.yaml").write_text(yaml.safe_dump(config))
    changed = run([SNAKEMAKE, "-n", "--configfile", "config/longer.yaml"], work, env)
    rules = {j["rule"] for j in parse_dry_run(changed.stdout + changed.stderr)}
    assert "tokenize" in rules and "prepare_corpus" not in rules
    assert len(calls(env)) == before
