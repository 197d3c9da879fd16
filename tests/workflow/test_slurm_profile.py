"""The SLURM profile (profiles/slurm), checked without a cluster.

A dry run with the profile, as a user types it (no ``--cores``), gives each
job's threads and resources; the executor plugin's own functions then turn
them into the sbatch command line it would submit, so a resource the plugin
rejects or ignores shows here. The configuration has one CUDA device to
calibrate and one CPU device with a fixed max_batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from test_snakemake import ROOT, SNAKEMAKE, parse_dry_run

from adloco.config import load_config

# Every test here asks Snakemake (a dry run or its API in a process of its own).
pytestmark = pytest.mark.workflow_cli

PROFILE = "profiles/slurm"
ENV = {"SBATCH_ACCOUNT": "proj-adloco", "SBATCH_PARTITION": "gpu-short", "ADLOCO_GPU_MODEL": "a100"}
INT_RESOURCES = ("mem_mb", "runtime", "cpus_per_task", "gpu")


def cuda_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    config["seeds"] = [0, 1]
    config["cluster"]["devices"] = [
        {"name": "gpu-sim", "count": 2, "kind": "cuda", "memory_gib": 20.0, "max_batch": None},
        {"name": "cpu-fixed", "count": 1, "kind": "cpu", "memory_gib": 1.0, "max_batch": 16},
    ]
    path = tmp_path / "cuda.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def dry_run(config: Path, env: dict[str, str], *extra: str) -> list[dict]:
    # No --cores: the profile's `cores` keeps a dry run from cutting threads to 1.
    result = subprocess.run(
        [SNAKEMAKE, "-n", "--forceall", "--workflow-profile", PROFILE]
        + ["--configfile", str(config), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"workflow specific profile {PROFILE}" in result.stderr
    return parse_dry_run(result.stdout + result.stderr)


class Resources(dict):
    """Job resources as the plugin reads them: ``.get(name)`` and ``.name``."""

    __getattr__ = dict.get


def sbatch_command(job: dict) -> str:
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    resources = Resources(
        {k: int(v) if k in INT_RESOURCES else v for k, v in job["resources"].items()}
    )
    stub = SimpleNamespace(resources=resources, threads=int(job.get("threads", 1)))
    # The executor validates the account with sacctmgr and passes " -A <account>".
    params = {
        "run_uuid": "uuid",
        "slurm_logfile": "logs/slurm/job.log",
        "comment_str": job["rule"],
        "account": f" -A {resources['slurm_account']}",
        "partition": f" -p {resources['slurm_partition']}",
        "workdir": str(ROOT),
    }
    return get_submit_command(stub, params) + set_gres_string(stub)


@pytest.fixture(scope="module")
def slurm_jobs(tmp_path_factory) -> list[dict]:
    return dry_run(cuda_config(tmp_path_factory.mktemp("slurm")), ENV)


def test_gpu_jobs_ask_for_one_gpu_of_the_model_and_cpu_jobs_for_none(slurm_jobs):
    by_rule: dict[str, list[dict]] = {}
    for job in slurm_jobs:
        by_rule.setdefault(job["rule"], []).append(job)
    # Every device is calibrated (a fixed max_batch skips only the search, not
    # the step timing); only the CUDA device's job asks for a GPU.
    calibrations = {j["wildcards"]["device"]: j for j in by_rule["calibrate"]}
    assert sorted(calibrations) == ["cpu-fixed", "gpu-sim"]
    assert calibrations["cpu-fixed"]["resources"].get("gpu", "0") == "0"
    assert calibrations["cpu-fixed"]["resources"].get("gpu_model") in (None, "None")
    for job in [calibrations["gpu-sim"], *by_rule["variance"], *by_rule["train"]]:
        assert job["resources"]["gpu"] == "1", job
        assert job["resources"]["gpu_model"] == "a100", job
    for rule in ("prepare_corpus", "tokenize", "report"):
        assert "gpu" not in by_rule[rule][0]["resources"]
        assert "gpu_model" not in by_rule[rule][0]["resources"]


# What the rules ask for cuda_config's jobs (workflow/lib/adloco_workflow/resources.py),
# by hand: a training job feeds one GPU with 4 threads and holds 4000 MB plus the
# simulated CPU device's memory (1 device x 1.0 GiB = 1024 MB); a day per seed.
TRAIN_THREADS = 4
TRAIN_MEM_MB = 4000 + 1024
TRAIN_RUNTIME_MIN = 24 * 60


def test_sbatch_commands_carry_account_partition_time_memory_cpus_and_gpus(slurm_jobs):
    profile = yaml.safe_load((ROOT / PROFILE / "config.yaml").read_text())
    # The profile sets no resources of its own for a rule: they come from the preset.
    assert "set-resources" not in profile and "set-threads" not in profile
    trains = [j for j in slurm_jobs if j["rule"] == "train"]
    assert len(trains) == 4  # 2 runs x 2 seeds
    for job in trains:
        command = sbatch_command(job)
        assert " -A proj-adloco " in command
        assert " -p gpu-short " in command
        assert f" -t {TRAIN_RUNTIME_MIN} " in command
        assert f" --mem {TRAIN_MEM_MB} " in command
        assert f"--cpus-per-task={TRAIN_THREADS}" in command
        assert command.endswith(" --gpus=a100:1")
        assert "--gres" not in command
    tokenize = sbatch_command(next(j for j in slurm_jobs if j["rule"] == "tokenize"))
    assert " -t 240 " in tokenize and " --mem 8000 " in tokenize  # workflow/rules/tokenize.smk
    assert "--gpus" not in tokenize


def test_the_dry_run_prints_the_threads_the_cluster_gives(slurm_jobs):
    # `snakemake -n --workflow-profile profiles/slurm` without --cores: every
    # job's command gets the threads sbatch asks for (train: 4 feeding its GPU), not 1.
    profile = yaml.safe_load((ROOT / PROFILE / "config.yaml").read_text())
    assert profile["cores"] >= TRAIN_THREADS
    trains = [j for j in slurm_jobs if j["rule"] == "train"]
    for job in trains:
        assert job["resources"]["cpus_per_task"] == str(TRAIN_THREADS)
        # One training process (cluster.processes_per_machine 1): it gets them all.
        assert f" --threads {TRAIN_THREADS} " in job["shell"], job["shell"]
    # Every job that takes --threads is given the cores its sbatch asks for.
    threaded = [j for j in slurm_jobs if " --threads " in j.get("shell", "")]
    assert {j["rule"] for j in threaded} >= {"train", "calibrate", "variance"}
    for job in threaded:
        given = int(job["shell"].split(" --threads ")[1].split()[0])
        assert given == int(job["resources"]["cpus_per_task"]), job


def test_the_test_preset_fits_a_two_cpu_node(tmp_path):
    # The test preset asks for little: every job fits the 2-CPU, 20 GB node of
    # tests/workflow/test_slurm_real.py.
    jobs = dry_run(ROOT / "config/test.yaml", ENV)
    cluster_jobs = [j for j in jobs if j["rule"] not in ("default", "all", "report")]
    assert {j["rule"] for j in cluster_jobs} >= {"tokenize", "calibrate", "train", "variance"}
    for job in cluster_jobs:
        assert int(job["resources"]["cpus_per_task"]) <= 2, job
        assert int(job["resources"]["mem_mb"]) <= 20_000, job


def test_cores_on_the_command_line_cut_threads_as_snakemake_documents(tmp_path):
    # --cores overrides the profile's: a job's threads are cut to it (train: 4 -> 2).
    jobs = dry_run(cuda_config(tmp_path), ENV, "--cores", "2")
    train = next(j for j in jobs if j["rule"] == "train")
    assert train["resources"]["cpus_per_task"] == "2" and " --threads 2 " in train["shell"]


def test_training_runs_are_independent_jobs_and_the_profile_lets_them_run_together(slurm_jobs):
    profile = yaml.safe_load((ROOT / PROFILE / "config.yaml").read_text())
    trains = [j for j in slurm_jobs if j["rule"] == "train"]
    train_outputs = {p for j in trains for p in j["output"]}
    for job in trains:
        assert not set(job["input"]) & train_outputs
    assert profile["jobs"] >= len(trains)
    assert profile["executor"] == "slurm"
    assert "group" not in json.dumps(profile)


def test_without_account_variables_the_plugin_chooses(tmp_path):
    env = {k: "" for k in ("SBATCH_ACCOUNT", "SBATCH_PARTITION", "ADLOCO_GPU_MODEL")}
    jobs = dry_run(cuda_config(tmp_path), env)
    train = next(j for j in jobs if j["rule"] == "train")
    assert "slurm_account" not in train["resources"]
    assert "slurm_partition" not in train["resources"]
    # A GPU without a model: sbatch --gpus=1, any model.
    assert train["resources"]["gpu"] == "1"
    assert "gpu_model" not in train["resources"]


def test_report_is_a_local_rule():
    # Asked of Snakemake itself, in a separate process (the Snakefile mutates
    # its global config): what Workflow.is_local answers under a cluster executor.
    code = (
        "import json; from pathlib import Path;"
        "from snakemake.api import SnakemakeApi;"
        "from snakemake.settings.types import ConfigSettings, ResourceSettings, OutputSettings\n"
        "with SnakemakeApi(OutputSettings()) as api:\n"
        "    wf = api.workflow(resource_settings=ResourceSettings(),"
        " config_settings=ConfigSettings(), snakefile=Path('Snakefile'), workdir=Path('.'))\n"
        "    w = wf._workflow\n"
        "    print(json.dumps({r.name: r.group is None and (r.name in w._localrules or r.norun)"
        " for r in w.rules}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    local = json.loads(result.stdout.strip().splitlines()[-1])
    assert local["report"] is True
    assert not any(local[r] for r in ("prepare_corpus", "tokenize", "calibrate", "variance"))
    # config/config.yaml: a rule per run, train_<run>; each a cluster job.
    trains = [rule for rule in local if rule.startswith("train_")]
    runs = load_config(ROOT / "config" / "config.yaml").runs
    assert sorted(trains) == sorted(f"train_{name}" for name in runs)
    assert not any(local[rule] for rule in trains)


def test_a_device_gpu_model_in_the_config_wins_over_the_environment(tmp_path):
    path = cuda_config(tmp_path)
    config = yaml.safe_load(path.read_text())
    config["cluster"]["devices"][0]["gpu_model"] = "h100"
    path.write_text(yaml.safe_dump(config))
    jobs = dry_run(path, ENV)
    for rule in ("train", "calibrate"):
        # The CPU device's calibration asks for no GPU; training reads its calibration too.
        job = next(
            j for j in jobs if j["rule"] == rule and j["wildcards"].get("device") != "cpu-fixed"
        )
        assert job["resources"]["gpu_model"] == "h100", job
