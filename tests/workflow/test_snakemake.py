"""The Snakemake workflow as a user runs it from the repository root.

Dry runs only (nothing executes): the linter is clean, the DAG of the default
configuration has the expected jobs per rule with the paths of
``adloco.core.paths``, the default profile is really applied, and a bad
configuration fails at parse time naming the key.
"""

from __future__ import annotations

import copy
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from adloco.config import config_from_dict
from adloco.core import paths

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
# Every test here runs Snakemake (its start-up is most of each one's second).
pytestmark = pytest.mark.workflow_cli


def snakemake(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def parse_dry_run(text: str) -> list[dict]:
    """Jobs of a dry run's output: rule, input/output lists, wildcards, resources, shell."""
    jobs: list[dict] = []
    job: dict | None = None
    for line in text.splitlines():
        if m := re.match(r"^(?:local)?rule (\S+):$", line):
            job = {"rule": m.group(1), "input": [], "output": [], "wildcards": {}, "resources": {}}
            jobs.append(job)
        elif job is None:
            continue
        elif m := re.match(r"^    (input|output): (.*)$", line):
            job[m.group(1)] = [p.strip() for p in m.group(2).split(",")]
        elif m := re.match(r"^    (log|threads|priority): (.*)$", line):
            job[m.group(1)] = m.group(2)
        elif m := re.match(r"^    (wildcards|resources): (.*)$", line):
            job[m.group(1)] = dict(kv.split("=", 1) for kv in m.group(2).split(", "))
        elif line.startswith("Shell command: "):
            job["shell"] = line.removeprefix("Shell command: ")
    return jobs


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def stage_of(rule: str) -> str:
    """The adloco command of a rule: train_<run> (a job per run) is `adloco train`."""
    return "train" if rule.startswith("train_") else rule.replace("_", "-")


def expected_train_jobs(config: dict) -> dict[str, int]:
    """The training jobs a dry run of ``config`` plans, by rule.

    One per run (``train_<run>``) with ``snakemake.train_jobs: run``, else one
    per run and seed (``train``).
    """
    seeds = {run: config_from_dict(config).run_seeds(run) for run in config["runs"]}
    if config.get("snakemake", {}).get("train_jobs", "seed") == "run":
        return {f"train_{run}": 1 for run in seeds}
    return {"train": sum(len(s) for s in seeds.values())}


@pytest.fixture(scope="module")
def default_dry_run() -> str:
    # --forceall: the DAG must not depend on outputs already on disk.
    result = snakemake("-n", "--forceall")
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def per_seed_dry_run(tmp_path_factory) -> tuple[dict, str]:
    """The default configuration with a Snakemake job per run and seed."""
    config = load_yaml(ROOT / "config/config.yaml")
    config["snakemake"]["train_jobs"] = "seed"
    path = tmp_path_factory.mktemp("per-seed") / "per-seed.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake("-n", "--forceall", "--configfile", str(path))
    assert result.returncode == 0, result.stderr + result.stdout
    return config, result.stdout + result.stderr


def test_lint_is_clean():
    result = snakemake("--lint")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Lints for" not in output
    assert "Congratulations, your workflow is in a good condition!" in output


@pytest.mark.parametrize(
    "config_file", ["config/config.yaml", "config/test.yaml", "config/paper.yaml"]
)
def test_dry_run_has_one_job_per_stage_device_and_run(config_file):
    config = load_yaml(ROOT / config_file)
    result = snakemake("-n", "--forceall", "--configfile", config_file)
    assert result.returncode == 0, result.stderr + result.stdout
    counts = Counter(job["rule"] for job in parse_dry_run(result.stdout + result.stderr))
    expected = {
        "prepare_corpus": 1 if config["data"]["source"] == "offline-wiki" else 0,
        "tokenize": 1,
        "calibrate": len(config["cluster"]["devices"]),  # every device, fixed max_batch or not
        "pretrain": 1 if config["model"]["source"] == "base" else 0,
        "variance": 1,
        **expected_train_jobs(config),
        "report": 1,
        "default": 1,
    }
    assert {rule: counts[rule] for rule in expected} == expected
    assert set(counts) <= set(expected)


def test_dry_run_uses_the_paths_of_the_package(per_seed_dry_run):
    config, text = per_seed_dry_run
    exp = config["experiment"]
    jobs = parse_dry_run(text)
    trains = [j for j in jobs if j["rule"] == "train"]
    assert {(j["wildcards"]["run"], j["wildcards"]["seed"]) for j in trains} == {
        (run, str(seed))
        for run in config["runs"]
        for seed in config_from_dict(config).run_seeds(run)
    }
    for job in trains:
        run, seed = job["wildcards"]["run"], int(job["wildcards"]["seed"])
        run_dir = paths.run_dir(exp, run, seed)
        assert job["output"] == [
            str(run_dir / "metrics.jsonl"),
            str(run_dir / "summary.json"),
            str(run_dir / "final"),
        ]
        assert f"--out {run_dir} " in job["shell"]
        assert f"--checkpoints {paths.checkpoint_dir(exp, run, seed)} " in job["shell"]
        # torch gets the job's threads (capped at --cores in a local run).
        assert f" --threads {job.get('threads', '1')} " in job["shell"]
        # Checkpoints must outlive a failed job, so they are never an output.
        assert not any("checkpoints" in p for p in job["output"])
        assert str(paths.tokenized_dir(config["data"]["dataset"]) / "manifest.json") in job["input"]
    # The data stages log per data set, shared by every experiment.
    tokenize = next(j for j in jobs if j["rule"] == "tokenize")
    assert tokenize["log"] == str(paths.data_logs_dir(config["data"]["dataset"]) / "tokenize.log")
    calibrations = [j for j in jobs if j["rule"] == "calibrate"]
    for job in calibrations:
        assert job["output"] == [str(paths.calibration_file(exp, job["wildcards"]["device"]))]
        # Timed with a training process's threads: one on a CPU device, so it
        # runs beside the base's pretraining.
        assert job.get("threads", "1") == "1" and " --threads 1 " in job["shell"]
    # The variance analysis gets its job's threads too (not torch's every core).
    variance = next(j for j in jobs if j["rule"] == "variance")
    assert f" --threads {variance.get('threads', '1')} " in variance["shell"]
    report = next(j for j in jobs if j["rule"] == "report")
    assert str(paths.report_dir(exp) / "index.html") in report["output"]
    assert str(paths.report_dir(exp) / "summary.csv") in report["output"]
    summaries = {
        str(paths.run_dir(exp, j["wildcards"]["run"], int(j["wildcards"]["seed"])))
        + "/summary.json"
        for j in trains
    }
    assert summaries <= set(report["input"])


def test_a_job_per_run_writes_every_seed_folder_of_its_run(default_dry_run, per_seed_dry_run):
    # config/config.yaml: snakemake.train_jobs run. One job per run, named
    # train_<run>, trains the run's own seeds into the folders a job per seed
    # writes, longest first; the other jobs are those of a job per seed.
    config = load_yaml(ROOT / "config/config.yaml")
    assert config["snakemake"]["train_jobs"] == "run"
    exp = config["experiment"]
    jobs = parse_dry_run(default_dry_run)
    trains = {j["rule"]: j for j in jobs if j["rule"].startswith("train_")}
    assert set(trains) == {f"train_{run}" for run in config["runs"]}
    for run in config["runs"]:
        job, seeds = trains[f"train_{run}"], config_from_dict(config).run_seeds(run)
        assert job["output"] == [
            str(paths.run_dir(exp, run, seed) / name)
            for name in ("metrics.jsonl", "summary.json", "final")
            for seed in seeds
        ]
        assert (
            f" --run-name {run} --seed all " in job["shell"]
            and f" --out {paths.runs_dir(exp) / run} " in job["shell"]
            and f" --checkpoints {paths.checkpoint_dir(exp, run, 0).parent} " in job["shell"]
            and f" --live {paths.live_dir(exp, run, 0).parent} " in job["shell"]
        )
        assert job["log"] == f"logs/{exp}/train/{run}.log"
        assert int(job["priority"]) == len(seeds)
        assert int(job["resources"]["runtime"]) == 24 * 60 * len(seeds)
    headline = {r for r in config["runs"] if "seeds" not in config["runs"][r]}
    top_level = len(config["seeds"])  # the runs a claim compares train the top-level seeds
    assert all(int(trains[f"train_{r}"]["priority"]) == top_level for r in headline)
    per_seed = parse_dry_run(per_seed_dry_run[1])
    assert sorted(j["rule"] for j in jobs if not j["rule"].startswith("train_")) == sorted(
        j["rule"] for j in per_seed if j["rule"] != "train"
    )


def test_a_seed_as_target_trains_its_whole_run_with_a_job_per_run():
    target = str(paths.run_dir("default", "adloco", 3) / "summary.json")
    result = snakemake("-n", "--forceall", target)
    assert result.returncode == 0, result.stderr + result.stdout
    rules = {j["rule"] for j in parse_dry_run(result.stdout + result.stderr)}
    assert {r for r in rules if r.startswith("train")} == {"train_adloco"}
    assert "report" not in rules


def test_a_seed_as_target_trains_that_seed_alone_with_a_job_per_seed(tmp_path):
    config = load_yaml(ROOT / "config/config.yaml")
    config["snakemake"]["train_jobs"] = "seed"
    path = tmp_path / "per-seed.yaml"
    path.write_text(yaml.safe_dump(config))
    target = str(paths.run_dir("default", "adloco", 3) / "summary.json")
    result = snakemake("-n", "--forceall", target, "--configfile", str(path))
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = parse_dry_run(result.stdout + result.stderr)
    trains = [j for j in jobs if j["rule"].startswith("train")]
    assert [(j["rule"], j["wildcards"]) for j in trains] == [
        ("train", {"run": "adloco", "seed": "3"})
    ]


def test_every_job_logs_and_passes_the_config_file(default_dry_run):
    for job in parse_dry_run(default_dry_run):
        if job["rule"] == "default":
            continue
        assert job["log"].startswith("logs/"), job
        assert job["shell"].startswith(f"adloco {stage_of(job['rule'])} "), job
        assert "--config config/config.yaml " in job["shell"]
        assert job["shell"].endswith(f"> {job['log']} 2>&1")


def test_default_profile_is_applied_from_the_root(default_dry_run):
    # Where Snakemake 9 looks: profiles/default next to the Snakefile it uses.
    # printshellcmds comes only from the profile, so "Shell command:" lines
    # show that the profile was read; `--workflow-profile none` drops them.
    profile = load_yaml(ROOT / "profiles/default/config.yaml")
    assert profile["printshellcmds"] is True
    assert profile["resources"] == {"gpu": 1}
    jobs = [j for j in parse_dry_run(default_dry_run) if j["rule"] != "default"]
    assert "workflow specific profile profiles/default" in default_dry_run
    assert default_dry_run.count("Shell command: adloco ") == len(jobs) > 0
    without = snakemake("-n", "--forceall", "--workflow-profile", "none", "--cores", "1")
    assert without.returncode == 0, without.stdout + without.stderr
    assert "Shell command:" not in without.stdout + without.stderr
    # One profile of each kind, both beside the Snakefile: no copy or link elsewhere.
    assert sorted(p.name for p in (ROOT / "profiles").iterdir()) == ["default", "slurm"]
    assert not (ROOT / "workflow/profiles").exists()


def test_a_configfile_replaces_the_default_file_instead_of_merging(tmp_path):
    # Snakemake deep-merges --configfile into config/config.yaml; the jobs read
    # the given file alone, so runs of the default file must not leak in.
    config = load_yaml(ROOT / "config/test.yaml")
    config["runs"] = {"only-diloco": {"method": "diloco"}}
    config["report"].update(adloco=None, diloco="only-diloco")  # roles name existing runs
    path = tmp_path / "one-run.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake("-n", "--forceall", "--configfile", str(path))
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = parse_dry_run(result.stdout + result.stderr)
    assert [j["wildcards"]["run"] for j in jobs if j["rule"] == "train"] == ["only-diloco"]
    assert all(f"--config {path} " in j["shell"] for j in jobs if j["rule"] != "default")


@pytest.mark.reliability("configs")
def test_config_on_the_command_line_is_refused_in_one_line():
    result = snakemake("-n", "--config", "seed=3")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    error = [line for line in output.splitlines() if "error" in line.lower()]
    assert error == [
        "snakemake: error: --config seed=3: the configuration file is the single source of "
        "every setting (the adloco commands read the file, not Snakemake's config); copy "
        "config/config.yaml, edit the copy and pass it with --configfile"
    ], output
    assert "Traceback" not in output and 'File "' not in output


@pytest.mark.reliability("configs")
@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--configfile", "missing.yaml"], "--configfile missing.yaml: no such file; "),
        (
            ["--configfile", "config/test.yaml", "all"],
            "--configfile config/test.yaml all: all is no file; ",
        ),
    ],
    ids=["missing", "target after it"],
)
def test_a_configfile_that_is_no_file_is_refused_in_one_line(argv, named):
    result = snakemake("-n", *argv)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    error = [line for line in output.splitlines() if "error" in line.lower()]
    assert len(error) == 1 and error[0].startswith(f"snakemake: error: {named}"), output
    assert "Traceback" not in output and "FileNotFoundError" not in output


@pytest.mark.reliability("workflow")
def test_jobs_find_adloco_beside_snakemake_without_the_venv_on_path(tmp_path):
    # `.venv/bin/snakemake` with a PATH that lacks .venv/bin: the corpus job (a real
    # `adloco prepare-corpus`) must find the adloco installed beside Snakemake.
    from test_pipeline_wiring import make_copy

    work, env = make_copy(tmp_path, fake=False)
    env["PATH"] = "/usr/bin:/bin"
    target = "data/raw/test-tiny"
    result = subprocess.run(
        [SNAKEMAKE, target, "--cores", "1", "--configfile", "config/test.yaml"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "command not found" not in output
    assert len(list((work / target).glob("c4-train.*.json.gz"))) >= 1


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("train", "max_rounds", "zero", "train.max_rounds: 'zero' is not of type 'integer'"),
        ("runs", "adloco", {"method": "adloco", "inner_lr": -1.0}, "runs.adloco.inner_lr"),
        ("train", "eta", 1.2, "train.eta: 1.2 is greater than or equal to the maximum of 1"),
        ("variance", "eta", 1.0, "variance.eta"),
        ("runs", "adloco", {"method": "adloco", "eta": 2.0}, "runs.adloco.eta"),
        ("train", "merge_count", 1, "train.merge_count"),
        ("train", "inner_lr", float("nan"), "train.inner_lr: nan is not a finite number"),
        ("report", "test_level", float("inf"), "report.test_level: inf is not"),
    ],
)
def test_malformed_config_fails_at_parse_time_naming_the_key(
    tmp_path, section, key, value, message
):
    config = load_yaml(ROOT / "config/config.yaml")
    config[section][key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake("-n", "--configfile", str(path))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{path}: " in output and message in output
    assert "Building DAG of jobs" not in output


def test_two_devices_with_one_name_fail_at_parse_time(tmp_path):
    config = load_yaml(ROOT / "config/config.yaml")
    devices = config["cluster"]["devices"]
    devices.append({**copy.deepcopy(devices[0]), "count": 1})  # no shared dict: no YAML alias
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake("-n", "--configfile", str(path))
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"cluster.devices.1.name: '{devices[0]['name']}' is also the name" in output


@pytest.mark.parametrize("given", [True, False], ids=["--configfile", "default file"])
def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, given):
    # Snakemake reads the file itself before the workflow's code runs, and its
    # own message names neither the file nor the line.
    text = (ROOT / "config/test.yaml").read_text()
    broken = text.replace("  max_rounds: 3 ", "  max_rounds: [3 ", 1)
    line = 1 + text[: text.index("  max_rounds: 3 ")].count("\n")
    work = tmp_path / "repo"
    work.mkdir()
    for name in ("Snakefile", "workflow", "profiles", "config"):
        (work / name).symlink_to(ROOT / name)
    if given:
        (work / "mine.yaml").write_text(broken)
        result = snakemake("-n", "--configfile", "mine.yaml", cwd=work)
        name = "mine.yaml"
    else:
        (work / "config").unlink()
        (work / "config").mkdir()
        (work / "config/config.yaml").write_text(broken)
        result = snakemake("-n", cwd=work)
        name = "config/config.yaml"
    assert result.returncode != 0
    assert f"{name}: not valid YAML: line {line + 1}, column " in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_every_path_in_every_command_is_quoted(tmp_path):
    # Paths with spaces stay one argument each (the end-to-end run with spaces
    # is in test_pipeline_real.py).
    config = load_yaml(ROOT / "config/test.yaml")
    config["data"]["raw_dir"] = "data/raw/test tiny"
    path = tmp_path / "my config.yaml"
    path.write_text(yaml.safe_dump(config))
    result = snakemake("-n", "--forceall", "--configfile", str(path))
    assert result.returncode == 0, result.stderr + result.stdout
    jobs = [j for j in parse_dry_run(result.stdout + result.stderr) if j["rule"] != "default"]
    assert {j["rule"] for j in jobs} >= {"prepare_corpus", "tokenize", "train", "report"}
    for job in jobs:
        argv = shlex.split(job["shell"])
        assert argv[argv.index("--config") + 1] == str(path), job["shell"]
        assert argv[-3:] == [">", job["log"], "2>&1"]
        if job["rule"] in ("prepare_corpus", "tokenize"):
            flag = "--out" if job["rule"] == "prepare_corpus" else "--raw"
            assert argv[argv.index(flag) + 1] == "data/raw/test tiny", job["shell"]
