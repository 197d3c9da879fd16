"""dvc.yaml and the Snakemake workflow describe the same pipeline.

Both are resolved by their own tools: Snakemake's dry run on the default
configuration gives each job's shell command and files, DVC's index gives each
templated stage's command, dependencies, outputs and params. Every job must
match one stage by command (the log redirection, the threads and DVC's
``workflow/bin/adloco`` for ``adloco`` aside) and the other way
round, with the same files (a DVC folder may hold a Snakemake file) and the
params keys of the stages' declarations (src/adloco/stages/). Training is the one
difference of granularity: Snakemake has a job per run and seed, DVC a stage
per run that trains each of the run's seeds (``--seed all``), so the train
jobs of one run are compared, together, with its stage. dvc.yaml reads
params.yaml, a link to config/config.yaml; pointed at another preset, the
stages become that preset's, with the paths of ``adloco.core.paths``.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_snakemake import ROOT, SNAKEMAKE, parse_dry_run

from adloco.config import validate
from adloco.core import paths
from adloco.core.io import OWNED_LIST
from adloco.dvc.params import MARK, params_text
from adloco.stages import snakemake_params
from config_edits import shipped_configs

# What dvc.yaml reads; Snakemake is given the same file so that commands match.
CONFIG_FILE = "params.yaml"
# What runs every stage's adloco command in dvc.yaml.
ADLOCO = "workflow/bin/adloco"


def normalize(command: str) -> str:
    """The command's arguments, quoted one way (Snakemake quotes only where needed)."""
    # Snakemake sends a job's output to its log; DVC shows it on the terminal.
    command = re.sub(r"\s*>\s*\S+\s+2>&1\s*$", "", command)
    # Snakemake gives a training job its share of the cores; DVC runs one stage
    # at a time and leaves torch its default (every core).
    command = re.sub(r" --threads \d+", "", command)
    args = shlex.split(command)
    # DVC runs adloco through workflow/bin/adloco (the adloco on PATH, else the
    # checkout's .venv); Snakemake puts the adloco beside it on the jobs' PATH.
    if args[:1] == [ADLOCO]:
        args[0] = "adloco"
    return shlex.join(args)


def dvc_form(command: str) -> str:
    """A Snakemake train job's command as the DVC stage of its run spells it (``--seed all``)."""
    args = shlex.split(command)
    if args[:2] != ["adloco", "train"]:
        return command
    seed = args[args.index("--seed") + 1]
    if seed == "all":  # a job per run (snakemake.train_jobs: run) runs DVC's command
        return command
    args[args.index("--seed") + 1] = "all"
    for flag in ("--out", "--checkpoints", "--live"):
        folder = args[args.index(flag) + 1]
        assert folder.endswith(f"/{paths.seed_dir_name(seed)}"), folder
        args[args.index(flag) + 1] = folder.rsplit("/", 1)[0]
    return shlex.join(args)


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def stage_params() -> dict[str, list[str]]:
    """The keys of each Snakemake job's ``settings`` param (the stages' declarations)."""
    return snakemake_params()


@pytest.fixture(scope="module", params=["run", "seed"], ids=["a job per run", "a job per seed"])
def snakemake_jobs(request, tmp_path_factory) -> dict[str, dict]:
    """Snakemake's jobs of params.yaml, grouped as DVC's stages: a run's seeds together.

    params.yaml (config/config.yaml's) has a job per run; the other way is a
    copy with ``snakemake.train_jobs: seed``, whose commands name params.yaml.
    """
    configfile = CONFIG_FILE
    if request.param == "seed":
        config = yaml.safe_load((ROOT / CONFIG_FILE).read_text())
        assert config["snakemake"]["train_jobs"] == "run"
        config["snakemake"]["train_jobs"] = "seed"
        configfile = str(tmp_path_factory.mktemp("per-seed") / CONFIG_FILE)
        Path(configfile).write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [SNAKEMAKE, "-n", "--forceall", "--printshellcmds", "--configfile", configfile],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = [j for j in parse_dry_run(result.stdout + result.stderr) if j["rule"] != "default"]
    assert len({normalize(j["shell"]) for j in jobs}) == len(jobs), "two jobs, one command"
    by_command: dict[str, dict] = {}
    for job in jobs:
        shell = normalize(job["shell"]).replace(
            f"--config {shlex.quote(configfile)} ", f"--config {CONFIG_FILE} "
        )
        rule, wildcards = job["rule"], dict(job["wildcards"])
        if rule.startswith("train_"):  # a job per run: the command of DVC's stage
            rule, wildcards = "train", {"run": rule.removeprefix("train_")}
            seeds = [re.search(r"/seed(\d+)/summary\.json$", f) for f in job["output"]]
            seeds = [m.group(1) for m in seeds if m]
        else:
            seeds = [wildcards.pop("seed", None)]
        if job["rule"].startswith("train"):
            assert (job["rule"] == "train") == (request.param == "seed")
        group = by_command.setdefault(
            dvc_form(shell),
            {"rule": rule, "input": [], "output": [], "wildcards": wildcards, "seeds": []},
        )
        group["input"] += [f for f in job["input"] if f not in group["input"]]
        group["output"] += job["output"]
        group["seeds"] += seeds
    return by_command


def dvc_index(root: Path) -> dict[str, dict]:
    """DVC's stages of the repository at ``root``, by normalized command."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    stages = {}
    with Repo(str(root)) as repo:
        for stage in repo.index.stages:
            params = [d for d in stage.deps if isinstance(d, ParamsDependency)]
            stages[normalize(stage.cmd)] = {
                "name": stage.name,
                "deps": [d.def_path for d in stage.deps if not isinstance(d, ParamsDependency)],
                "params": {d.def_path: list(d.params) for d in params},
                "outs": [o.def_path for o in stage.outs if not o.persist],
                "persist": [o.def_path for o in stage.outs if o.persist],
            }
    return stages


@pytest.fixture(scope="module")
def dvc_stages() -> dict[str, dict]:
    return dvc_index(ROOT)


def expected_outputs(config: dict) -> dict[str, list[str]]:
    """Each stage's outputs (persistent ones too, checkpoints aside), from adloco.core.paths."""
    exp, dataset = config["experiment"], config["data"]["dataset"]
    variance, report = paths.variance_dir(exp), paths.report_dir(exp)
    expected = {
        "prepare-corpus": [config["data"]["raw_dir"]],
        "tokenize": [paths.tokenized_dir(dataset)],
        "pretrain": [paths.base_dir(exp)],
        "variance": [
            variance / name for name in ("per_batch.csv", "draws.csv", OWNED_LIST, "variance.json")
        ]
        + [variance / "deviations.png"],
        "report": [
            report / name
            for name in (
                "index.html",
                "ladder.csv",
                "regimes.csv",
                "noise_scale.csv",
                OWNED_LIST,
                "claims.json",
                "summary.csv",
                "metrics.json",
                "median_curves.csv",
            )  # fmt: skip
        ]
        + [report / "curves.csv"]
        # Each figure's file, never the folder DVC would empty of a user's files.
        + [paths.report_figures_dir(exp) / f"{name}.png" for name in paths.REPORT_FIGURE_NAMES],
    }
    for index, device in enumerate(config["cluster"]["devices"]):
        expected[f"calibrate@{index}"] = [paths.calibration_file(exp, device["name"])]
    for run in config["runs"]:
        expected[f"train@{run}"] = [paths.runs_dir(exp) / run]
    return {name: sorted(map(str, outs)) for name, outs in expected.items()}


def stage_outputs(stages: dict[str, dict]) -> dict[str, list[str]]:
    """Each stage's outputs, persistent ones too, but for the checkpoints (no path of a result)."""
    return {
        s["name"]: sorted(s["outs"] + [p for p in s["persist"] if "/checkpoints/" not in p + "/"])
        for s in stages.values()
    }


@pytest.mark.heavy
def test_every_job_is_a_stage_with_the_same_command(snakemake_jobs, dvc_stages):
    assert sorted(snakemake_jobs) == sorted(dvc_stages)
    config = yaml.safe_load((ROOT / CONFIG_FILE).read_text())
    for command, job in snakemake_jobs.items():
        stage_name = dvc_stages[command]["name"]
        assert stage_name.split("@")[0].replace("-", "_") == job["rule"]
        if job["rule"] == "train":
            # The stage's `--seed all` trains exactly the seeds Snakemake has jobs for.
            run = stage_name.removeprefix("train@")
            expected = config["runs"][run].get("seeds", config["seeds"])
            assert sorted(map(int, job["seeds"])) == sorted(expected)


@pytest.mark.heavy
def test_stages_read_and_write_the_same_files(snakemake_jobs, dvc_stages):
    for command, job in snakemake_jobs.items():
        stage = dvc_stages[command]
        # Persistent outputs are outputs too, but for the checkpoints (no Snakemake output).
        outs = stage["outs"] + [p for p in stage["persist"] if "/checkpoints/" not in p + "/"]
        for kind, files, folders in (
            ("input", job["input"], stage["deps"]),
            ("output", job["output"], outs),
        ):
            # Only prepare-corpus reads nothing (the corpus ships in a package).
            assert (
                bool(files)
                == bool(folders)
                == (kind == "output" or job["rule"] != "prepare_corpus")
            )
            # A Snakemake folder may hold DVC's files too (the report's figures:
            # DVC names each, so that it never empties the folder).
            stray = [f for f in files if not any(within(f, d) or within(d, f) for d in folders)]
            # adloco's list of a folder's files: DVC caches it beside them, so
            # that a pulled folder is the one written; Snakemake need not track it.
            unused = [
                d
                for d in folders
                if not any(within(f, d) or within(d, f) for f in files)
                and Path(d).name != OWNED_LIST
            ]
            assert not stray, f"{stage['name']}: Snakemake {kind} not in dvc.yaml: {stray}"
            assert not unused, f"{stage['name']}: dvc.yaml path not in Snakemake {kind}: {unused}"


@pytest.mark.heavy
def test_checkpoints_persist_in_dvc_and_are_no_snakemake_output(snakemake_jobs, dvc_stages):
    trains = [(c, j) for c, j in snakemake_jobs.items() if j["rule"] == "train"]
    assert trains
    for command, job in trains:
        stage = dvc_stages[command]
        checkpoints = re.search(r"--checkpoints (\S+)", command).group(1)
        # The run's folder persists too: its stage is in no run cache anyway.
        out = re.search(r"--out (\S+)", command).group(1)
        assert stage["persist"] == [out, checkpoints]
        assert not any(within(o, checkpoints) for o in job["output"])
    # The corpus folder persists too: DVC must not empty a folder the user
    # named as data.raw_dir before adloco has checked what it holds.
    config = yaml.safe_load((ROOT / CONFIG_FILE).read_text())
    corpus = [s for s in dvc_stages.values() if s["name"] == "prepare-corpus"]
    assert [s["persist"] for s in corpus] == [[config["data"]["raw_dir"]]]
    pretrain = [s for s in dvc_stages.values() if s["name"] == "pretrain"]
    assert [s["persist"] for s in pretrain] == [
        [
            str(paths.base_dir(config["experiment"])),
            str(paths.base_checkpoint_dir(config["experiment"])),
        ]
    ]
    others = [
        s
        for s in dvc_stages.values()
        if not s["name"].startswith(("train@", "prepare-corpus", "pretrain"))
    ]
    assert all(not s["persist"] for s in others)


@pytest.mark.heavy
def test_stages_depend_on_the_same_config_keys(snakemake_jobs, dvc_stages):
    keys = stage_params()
    # DVC's stage of a run trains each of its seeds: the top-level list is an input too.
    keys["train"].insert(keys["train"].index("seed") + 1, "seeds")
    for command, job in snakemake_jobs.items():
        stage = dvc_stages[command]
        expected = [k.format(**job["wildcards"]) for k in keys[stage["name"].split("@")[0]]]
        assert stage["params"] == {CONFIG_FILE: expected}
        assert f"--config {CONFIG_FILE} " in command


def test_params_file_is_the_default_preset_made_for_dvc(monkeypatch):
    # `dvc repro` and `snakemake` run the same default out of the box: the
    # tracked params.yaml is what `adloco dvc-params` makes of config/config.yaml.
    monkeypatch.chdir(ROOT)
    assert not (ROOT / CONFIG_FILE).is_symlink()
    expected = params_text("config/config.yaml")
    assert (ROOT / CONFIG_FILE).read_text() == expected, (
        "params.yaml is not config/config.yaml's copy for DVC: run `adloco dvc-params`"
    )


def test_stages_write_the_paths_of_the_package(dvc_stages):
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    assert stage_outputs(dvc_stages) == expected_outputs(config)
    for stage in dvc_stages.values():
        if stage["name"].startswith("train@"):
            run = stage["name"].removeprefix("train@")
            seed_folder = paths.checkpoint_dir(config["experiment"], run, 0)
            assert stage["persist"] == [str(paths.run_seeds_dir(config["experiment"], run)),
                                        str(seed_folder.parent)]  # fmt: skip


BIN = Path(sys.executable).parent
DVC = str(BIN / "dvc")
# The tools of the virtual environment first; no usage reports; a git identity
# for the commits of the temporary repositories.
TOOLS_ENV = {
    **os.environ,
    "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    "DVC_NO_ANALYTICS": "1",
    **{f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
       for what, value in (("NAME", "adloco tests"), ("EMAIL", "tests@adloco.invalid"))},
}  # fmt: skip


def sh(*cmd: str, cwd: Path) -> str:
    """Run a command of the pipeline's tools in ``cwd``; its output, which must be a success."""
    result = subprocess.run(
        cmd, cwd=cwd, env=TOOLS_ENV, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, f"{cmd}\n{result.stdout}\n{result.stderr}"
    return result.stdout + result.stderr


def commit(work: Path, message: str, *files: str) -> None:
    sh("git", "add", *(files or ["-A"]), cwd=work)
    sh("git", "commit", "-q", "-m", message, cwd=work)


def dvc_copy(root: Path, preset: str) -> Path:
    """A git repository with the pipeline's DVC files, ``preset`` chosen as documented."""
    work = root / "repo"
    work.mkdir()
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy2(ROOT / name, work / name)
    # workflow/bin: the script that runs each stage's adloco command.
    for name in ("config", ".dvc", "workflow/bin"):
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns("cache", "tmp"))
    sh("git", "init", "-q", cwd=work)
    sh("adloco", "dvc-params", "--preset", f"config/{preset}", cwd=work)
    return work


SHIPPED_CONFIGS = shipped_configs()  # git-tracked: a user's own file in config/ is not one


@pytest.mark.workflow_cli
@pytest.mark.reliability("configs")
@pytest.mark.parametrize("preset", SHIPPED_CONFIGS)
def test_dvc_repro_dry_plans_every_shipped_config(tmp_path, preset):
    # DVC resolves every stage's params then, so a run name it reads otherwise
    # (a dot: runs.adloco-eta-0.8 as runs / adloco-eta-0 / 8) fails here.
    work = dvc_copy(tmp_path, preset)
    # `dvc repro --dry` still requires every dependency to exist (DVC's own
    # limitation): the stages' inputs stand in as empty folders.
    for stage in dvc_index(work).values():
        for dep in stage["deps"]:
            if not (work / dep).exists():  # config/tuning.json is in the copy
                (work / dep).mkdir(parents=True)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dvc"), "repro", "--dry"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "ERROR" not in output and "Running stage 'report'" in output, output
    # DVC reads params.yaml at another revision too (`dvc params diff`, `dvc exp
    # show`): committed, then another preset chosen, the difference is the presets'.
    commit(work, f"the pipeline, {preset}")
    other = "config.yaml" if preset == "test.yaml" else "test.yaml"
    sh("adloco", "dvc-params", "--preset", f"config/{other}", cwd=work)
    diff = json.loads(sh(DVC, "params", "diff", "HEAD", "--json", cwd=work))[CONFIG_FILE]
    experiments = [yaml.safe_load((ROOT / "config" / p).read_text())["experiment"]
                   for p in (preset, other)]  # fmt: skip
    assert (diff["experiment"]["old"], diff["experiment"]["new"]) == tuple(experiments)


def test_another_preset_chosen_by_adloco_dvc_params(tmp_path):
    # The documented way: `adloco dvc-params --preset config/test.yaml && dvc repro`.
    work = dvc_copy(tmp_path, "test.yaml")
    config = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    assert config["experiment"] != "default"
    stages = dvc_index(work)
    assert stage_outputs(stages) == expected_outputs(config)
    for command, stage in stages.items():
        assert f"--config {CONFIG_FILE} " in command
        assert list(stage["params"]) == [CONFIG_FILE]
    # The preset's own values, with the defaults it leaves out.
    from dvc.repo import Repo

    with Repo(str(work)) as repo:
        train = next(s for s in repo.index.stages if s.name == "train@diloco")
        (params,) = [d for d in train.deps if d.def_path == CONFIG_FILE]
        read = params.read_params()
    filled = validate(copy.deepcopy(config))
    assert yaml.safe_load((work / CONFIG_FILE).read_text()) == filled
    assert read == {k: filled[k] for k in ("seed", "seeds", "model", "cluster", "train")} | {
        "runs.diloco": filled["runs"]["diloco"]
    }
    assert "grad_clip_norm" not in config["train"]  # a default, written out for DVC


def test_default_remote_is_a_folder_beside_the_repository():
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        name = repo.config["core"]["remote"]
        url = repo.config["remote"][name]["url"]
    store = (ROOT / ".dvc" / url).resolve() if not Path(url).is_absolute() else Path(url)
    assert name == "local"
    # Outside the work tree, so neither git nor `make clean-results` touches it.
    assert ROOT not in store.parents and store.parent == ROOT.parent


def files_under(work: Path, *folders: str) -> set[str]:
    return {
        str(p.relative_to(work))
        for folder in folders
        for p in (work / folder).rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    """The test preset run once by `dvc repro` in a git repository of the pipeline's files.

    What git then sees is committed, as a DVC user does: dvc.lock and the
    files DVC keeps in git (metrics.json, median_curves.csv). The default
    remote of .dvc/config, a folder beside the repository, is the temporary
    folder's. Tests after the first change the repository (experiments), so
    they come in the order of this file.
    """
    work = dvc_copy(tmp_path_factory.mktemp("pipeline"), "test.yaml")
    commit(work, "the pipeline, the test preset")
    sh(DVC, "repro", cwd=work)
    commit(work, "a run of the test preset")
    return work


@pytest.mark.slow
def test_repro_writes_every_output_and_is_then_up_to_date(pipeline):
    config = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    for stage, outs in expected_outputs(config).items():
        assert all((pipeline / out).exists() for out in outs), stage
    for run in config["runs"]:
        assert any((pipeline / paths.checkpoint_dir("test", run, 0)).iterdir())
    assert json.loads(sh(DVC, "status", "--json", cwd=pipeline)) == {}
    # git keeps the two small files DVC reads at other commits; DVC the rest.
    report = paths.report_dir("test")
    tracked = sh("git", "ls-files", "results", "data", cwd=pipeline).split()
    assert tracked == [str(report / "median_curves.csv"), str(report / "metrics.json")]
    again = sh(DVC, "repro", cwd=pipeline)
    assert "Running stage" not in again and "didn't change, skipping" in again


@pytest.mark.slow
def test_a_pulled_clone_is_the_repository_it_was_pushed_from(pipeline):
    # Every file a stage writes is one of its declared outputs: a clone that
    # pulls them holds the same files and DVC finds nothing changed.
    sh(DVC, "push", cwd=pipeline)
    clone = pipeline.parent / "clone"  # beside it: the same default remote
    sh("git", "clone", "-q", str(pipeline), str(clone), cwd=pipeline.parent)
    sh(DVC, "pull", cwd=clone)
    assert json.loads(sh(DVC, "status", "--json", cwd=clone)) == {}
    pulled = files_under(clone, "data", "results")
    assert pulled == files_under(pipeline, "data", "results")
    # The files dvc.yaml once missed: the test preset skips the variance
    # stage's comparison, whose table is then its header alone.
    variance = paths.variance_dir("test")
    assert {str(variance / "draws.csv"), str(variance / OWNED_LIST)} <= pulled
    assert (clone / variance / "draws.csv").read_text().startswith("draw,")


@pytest.mark.slow
def test_metrics_read_as_one_table_and_the_plots_draw_one_line_per_run(pipeline):
    config = yaml.safe_load((ROOT / "config/test.yaml").read_text())
    report = paths.report_dir("test")
    doc = json.loads((pipeline / report / "metrics.json").read_text())
    shown = json.loads(sh(DVC, "metrics", "show", "--json", cwd=pipeline))
    # The one metrics file of the pipeline, and DVC reads it as written.
    assert shown == {"": {"data": {str(report / "metrics.json"): {"data": doc}}}}
    summaries = {
        run: json.loads((pipeline / paths.run_dir("test", run, 0) / "summary.json").read_text())
        for run in config["runs"]
    }
    # One seed per run: its median is that seed's final perplexity.
    assert doc["ppl"] == {run: s["final_val_perplexity"] for run, s in summaries.items()}
    assert doc["seeds"] == {run: 1 for run in config["runs"]}
    table = sh(DVC, "metrics", "show", cwd=pipeline).splitlines()
    assert {"ppl.diloco", "seeds.adloco", "target"} <= set(table[0].split())
    assert len(table) == 2 and max(map(len, table)) < 160

    plots = json.loads(sh(DVC, "plots", "show", "--json", cwd=pipeline))["data"]
    with open(pipeline / report / "median_curves.csv", newline="") as fh:
        curves = list(csv.DictReader(fh))
    for plot, x in (("perplexity-by-tokens", "tokens_total"),
                    ("perplexity-by-simulated-time", "sim_time_s")):  # fmt: skip
        (shown,) = plots[plot]
        encoding = shown["content"]["encoding"]
        assert (encoding["x"]["field"], encoding["y"]["field"]) == (x, "val_perplexity")
        assert encoding["color"]["field"] == "run"  # a line per run, not one zig-zag
        values = shown["content"]["data"]["values"]
        assert [(v["run"], v[x], v["val_perplexity"]) for v in values] == [
            (r["run"], r[x], r["val_perplexity"]) for r in curves
        ]
    # Three evaluated rounds of each run (train.max_rounds), each of its one seed.
    assert sorted((r["run"], r["round"], r["seeds"]) for r in curves) == sorted(
        (run, str(k), "1") for run in config["runs"] for k in (1, 2, 3)
    )


def experiments(shown: list[dict]) -> dict[str, dict]:
    """`dvc exp show --json`'s rows by name: the workspace, the commit, its experiments."""
    rows = {}
    for entry in shown:
        rows["workspace" if entry["rev"] == "workspace" else "commit"] = entry["data"]
        for experiment in entry.get("experiments") or []:
            for rev in experiment["revs"]:
                rows[rev["name"]] = rev["data"]
    return rows


@pytest.mark.slow
def test_experiments_rerun_only_the_stages_their_settings_reach(pipeline):
    preset = (pipeline / "config/test.yaml").read_text()
    # Queued: DVC runs it in a copy of the repository, from the commit's
    # dvc.lock and cache; a report setting re-runs the report alone.
    sh(DVC, "exp", "run", "--queue", "-n", "queued", "-S", "report.confidence=0.9", cwd=pipeline)
    queued = sh(DVC, "exp", "run", "--run-all", cwd=pipeline)
    # In the workspace: one run's setting re-runs that run's training and the report.
    here = sh(DVC, "exp", "run", "-n", "diloco-lr", "-S", "+runs.diloco.inner_lr=0.001",
              cwd=pipeline)  # fmt: skip
    ran = [set(re.findall(r"Running stage '([^']+)'", log)) for log in (queued, here)]
    assert ran == [{"report"}, {"train@diloco", "report"}]
    # -S edits params.yaml, made for DVC, never the preset (and keeps its first line).
    assert (pipeline / "config/test.yaml").read_text() == preset
    assert (pipeline / CONFIG_FILE).read_text().startswith(MARK)
    diff = json.loads(sh(DVC, "params", "diff", "HEAD", "--json", cwd=pipeline))
    assert diff == {CONFIG_FILE: {"runs.diloco.inner_lr": {"old": None, "new": 0.001}}}

    # Every row of `dvc exp show` has its settings and its metrics.
    rows = experiments(json.loads(sh(DVC, "exp", "show", "--json", cwd=pipeline)))
    assert set(rows) == {"workspace", "commit", "queued", "diloco-lr"}
    metrics = str(paths.report_dir("test") / "metrics.json")
    for name, row in rows.items():
        assert set(row["metrics"][metrics]["data"]["ppl"]) == {"diloco", "adloco"}, name
    settings = {n: row["params"][CONFIG_FILE]["data"] for n, row in rows.items()}
    assert settings["queued"]["report"]["confidence"] == 0.9
    assert settings["diloco-lr"]["runs"]["diloco"]["inner_lr"] == 0.001
    assert "inner_lr" not in settings["commit"]["runs"]["diloco"]
    # The plots of two revisions: a line per run of each.
    plots = json.loads(sh(DVC, "plots", "diff", "HEAD", "diloco-lr", "--json", cwd=pipeline))
    (shown,) = plots["data"]["perplexity-by-tokens"]
    lines = {(v["rev"], v["run"]) for v in shown["content"]["data"]["values"]}
    assert lines == {(rev, run) for rev in ("HEAD", "diloco-lr") for run in ("diloco", "adloco")}


# ---------------------------------------------------------------- what DVC deletes
# A user's files in the stages' output folders and an uncommitted edit of
# params.yaml, under the three commands that met them (docs/workflow.md, DVC,
# "What DVC deletes"): what adloco dvc-check names first, what the persistent
# folders keep for adloco's own refusal, and what DVC deletes all the same, so
# that the page stays true when DVC changes.
REPORT, VARIANCE = paths.report_dir("test"), paths.variance_dir("test")
SEED_FILE = paths.run_dir("test", "adloco", 0) / "mine.txt"  # a persistent folder's seed
RUN_FILE = paths.run_seeds_dir("test", "adloco") / "notes.md"  # beside the seed folders
FIGURE_FILE = paths.report_figures_dir("test") / "mine.png"  # a folder whose outputs are files
TOKENIZED_FILE = paths.tokenized_dir("test-tiny") / "mine.txt"  # a folder output, not persistent
REPORT_NOTE = REPORT / "note.md"  # a folder whose outputs are files
VARIANCE_NOTE = VARIANCE / "note.md"  # the same
OUTSIDE = paths.experiment_dir("test") / "notes.md"  # in no output folder
HAND_EDIT = ("  confidence: 0.95\n", "  confidence: 0.9\n")  # of params.yaml, uncommitted


def attempt(*cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=TOOLS_ENV, capture_output=True, text=True, timeout=600, check=False
    )


USER_FILES = (SEED_FILE, RUN_FILE, FIGURE_FILE, TOKENIZED_FILE, REPORT_NOTE, VARIANCE_NOTE, OUTSIDE)


def restored(work: Path) -> Path:
    """``work`` as committed: git's files, and DVC's outputs as dvc.lock records them."""
    for name in USER_FILES:  # what a test before left, had it failed
        (work / name).unlink(missing_ok=True)
    sh("git", "checkout", "-q", "HEAD", "--", ".", cwd=work)
    sh(DVC, "checkout", "--force", cwd=work)
    assert json.loads(sh(DVC, "status", "--json", cwd=work)) == {}
    return work


def leave(work: Path, *files: Path, edit: tuple[str, str] = HAND_EDIT) -> None:
    """A user's files, and the hand edit of params.yaml."""
    for name in files:
        (work / name).write_text(f"{name}, the user's\n")
    params = (work / CONFIG_FILE).read_text()
    assert params.count(edit[0]) == 1
    (work / CONFIG_FILE).write_text(params.replace(*edit))


def named_by_dvc_check(work: Path, monkeypatch) -> list[Path]:
    """The files of USER_FILES that `adloco dvc-check` names, each with the folder that holds it."""
    from adloco.config import load_config
    from adloco.dvc.check import foreign_files

    monkeypatch.chdir(work)
    problems = foreign_files(load_config(CONFIG_FILE))
    return [
        name
        for name in USER_FILES
        if any(
            f"{folder}: holds" in problem and str(name.relative_to(folder)) in problem
            for problem in problems
            for folder in name.parents
        )
    ]


def kept(work: Path, *files: Path) -> dict[str, bool]:
    return {str(name): (work / name).is_file() for name in files}


@pytest.mark.slow
@pytest.mark.reliability("dvc")
def test_repro_force_keeps_persistent_folders_for_adlocos_refusal(pipeline, monkeypatch):
    work = restored(pipeline)
    files = (SEED_FILE, RUN_FILE, FIGURE_FILE, REPORT_NOTE)  # in USER_FILES' order
    leave(work, *files)
    assert named_by_dvc_check(work, monkeypatch) == list(files)
    # The run's folder persists: DVC keeps both files, adloco train refuses the one
    # in a folder it replaces before any training, and the other stays beside it.
    result = attempt(DVC, "repro", "-f", "-s", "train@adloco", cwd=work)
    assert result.returncode != 0
    assert (
        f"adloco train: error: --out {SEED_FILE.parent}: holds 1 file(s) adloco did not write "
        "(mine.txt)" in result.stdout + result.stderr
    )
    # The report's outputs are its files, each figure's named (issue 45: DVC
    # emptied the figures folder before the stage ran): DVC deletes only its
    # own, and adloco report refuses both of the user's, kept, before any work.
    result = attempt(DVC, "repro", "-f", "-s", "report", cwd=work)
    assert result.returncode != 0
    assert "adloco report: error: --out results/test/report: holds 2 file(s) adloco did not " \
           "write (figures/mine.png, note.md)" in result.stdout + result.stderr  # fmt: skip
    assert all(kept(work, *files).values())
    assert HAND_EDIT[1] in (work / CONFIG_FILE).read_text()  # repro never writes params.yaml
    # A stage in the run cache is checked out instead of run: the same deletion.
    (work / TOKENIZED_FILE).write_text("mine\n")
    log = sh(DVC, "repro", "-s", "tokenize", cwd=work)
    assert "Stage 'tokenize' is cached - skipping run, checking out outputs" in log
    assert not (work / TOKENIZED_FILE).exists()
    restored(work)


@pytest.mark.slow
@pytest.mark.reliability("dvc")
def test_exp_run_deletes_files_in_every_folder_output_even_of_stages_it_skips(
    pipeline, monkeypatch
):
    work = restored(pipeline)
    files = (SEED_FILE, RUN_FILE, FIGURE_FILE, TOKENIZED_FILE, VARIANCE_NOTE, OUTSIDE)
    leave(work, *files)
    assert named_by_dvc_check(work, monkeypatch) == list(files[:-1])  # not the one outside
    # Run in a copy of the repository, an experiment leaves the workspace alone.
    sh(DVC, "exp", "run", "--temp", "-n", "in-a-copy", "-S", "snakemake.train_jobs=run", cwd=work)
    assert all(kept(work, *files).values())
    params = yaml.safe_load((work / CONFIG_FILE).read_text())
    assert (params["report"]["confidence"], params["snakemake"]["train_jobs"]) == (0.9, "seed")
    # No stage reads the snakemake section; the hand edit re-runs the report alone,
    # which refuses the user's figure: DVC no longer deletes it (issue 45).
    result = attempt(DVC, "exp", "run", "-n", "user-files", "-S", "snakemake.train_jobs=run",
                     cwd=work)  # fmt: skip
    log = result.stdout + result.stderr
    assert set(re.findall(r"Running stage '([^']+)'", log)) == {"report"}
    assert result.returncode != 0
    assert "adloco report: error: --out results/test/report: holds 1 file(s) adloco did not " \
           "write (figures/mine.png)" in log  # fmt: skip
    # DVC first checks out every output as dvc.lock records it: files in folder
    # outputs go, persistent ones and those of stages that do not run included;
    # a folder whose outputs are files, and what lies outside, keep theirs.
    assert kept(work, *files) == {
        str(SEED_FILE): False, str(RUN_FILE): False, str(FIGURE_FILE): True,
        str(TOKENIZED_FILE): False, str(VARIANCE_NOTE): True, str(OUTSIDE): True,
    }  # fmt: skip
    # The uncommitted edit is the experiment's, with -S's.
    params = yaml.safe_load((work / CONFIG_FILE).read_text())
    assert (params["report"]["confidence"], params["snakemake"]["train_jobs"]) == (0.9, "run")
    for name in (FIGURE_FILE, VARIANCE_NOTE, OUTSIDE):
        (work / name).unlink()
    restored(work)


@pytest.mark.slow
@pytest.mark.reliability("dvc")
def test_exp_apply_replaces_an_uncommitted_edit_and_deletes_files(pipeline, monkeypatch):
    from adloco.dvc.check import unsaved_edits

    work = restored(pipeline)
    sh(DVC, "exp", "run", "-n", "to-apply", "-S", "snakemake.train_jobs=run", cwd=work)
    assert unsaved_edits(work) == []  # the workspace holds the experiment's files
    restored(work)
    files = (SEED_FILE, FIGURE_FILE, REPORT_NOTE)
    # A value of no experiment (the queued one of confidence 0.9 holds HAND_EDIT's file).
    leave(work, *files, edit=(HAND_EDIT[0], "  confidence: 0.85\n"))
    edited = (work / CONFIG_FILE).read_text()
    assert unsaved_edits(work) == [CONFIG_FILE]
    assert named_by_dvc_check(work, monkeypatch) == [SEED_FILE, FIGURE_FILE, REPORT_NOTE]
    # dvc exp branch leaves the workspace alone, and git refuses to check the
    # branch out over the edit.
    sh(DVC, "exp", "branch", "to-apply", "to-apply-branch", cwd=work)
    assert attempt("git", "checkout", "-q", "to-apply-branch", cwd=work).returncode != 0
    assert (work / CONFIG_FILE).read_text() == edited
    assert all(kept(work, *files).values())
    # dvc checkout asks first (and refuses without a terminal), naming the files.
    result = attempt(DVC, "checkout", cwd=work)
    assert "Can't remove the following unsaved files without confirmation" in result.stderr
    assert str(work / SEED_FILE) in result.stderr and all(kept(work, *files).values())
    # dvc exp apply replaces the edit with the experiment's file, saved only in
    # refs/exps/apply/stash (until the next apply), and empties folder outputs,
    # persistent ones too; a folder whose outputs are files keeps the note and
    # the figure.
    sh(DVC, "exp", "apply", "to-apply", cwd=work)
    params = yaml.safe_load((work / CONFIG_FILE).read_text())
    assert (params["report"]["confidence"], params["snakemake"]["train_jobs"]) == (0.95, "run")
    assert sh("git", "show", f"refs/exps/apply/stash:{CONFIG_FILE}", cwd=work) == edited
    assert kept(work, *files) == {
        str(SEED_FILE): False, str(FIGURE_FILE): True, str(REPORT_NOTE): True
    }  # fmt: skip
    (work / REPORT_NOTE).unlink()
    (work / FIGURE_FILE).unlink()
    restored(work)
