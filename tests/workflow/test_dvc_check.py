"""`adloco dvc-check`: the files DVC would delete from the stages' output folders, named first.

The output folders are written as the stages write them (adloco.core.io.atomic_dir,
whose manifest lists their files; a checkpoint folder by its names), for the
test preset's runs and seeds, in a temporary working folder. Each case adds
one file of a user's to one of them and expects exactly that file named, with
its stage; the end-to-end cases under DVC are in test_dvc.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_snakemake import ROOT

from adloco import cli
from adloco.config import load_config
from adloco.core import paths
from adloco.core.io import atomic_dir
from adloco.dvc.check import foreign_files, output_folders, unsaved_edits

CONFIG = load_config(ROOT / "config/test.yaml")
EXP = CONFIG.experiment
RUN = next(iter(CONFIG.runs))


@pytest.fixture
def outputs(tmp_path, monkeypatch) -> Path:
    """Every output folder of the test preset's stages, as adloco writes them."""
    monkeypatch.chdir(tmp_path)
    for folder in output_folders(CONFIG):
        if folder.writer is None:  # a checkpoint folder
            folder.path.mkdir(parents=True)
            (folder.path / "checkpoint.json").write_text("{}")
            continue
        with atomic_dir(folder.path, folder.writer) as tmp:
            (tmp / "written.txt").write_text("adloco's\n")
            if folder.stage == "report":
                (tmp / "figures").mkdir()
                (tmp / "figures" / "curves.png").write_bytes(b"png")
    return tmp_path


def test_output_folders_are_every_stage_s_for_each_run_and_seed():
    folders = {(f.stage, str(f.path)) for f in output_folders(CONFIG)}
    expected = {
        ("prepare-corpus", CONFIG.data.raw_dir),
        ("tokenize", str(paths.tokenized_dir(CONFIG.data.dataset))),
        ("pretrain", str(paths.base_dir(EXP))),
        ("pretrain", str(paths.base_checkpoint_dir(EXP))),
        ("variance", str(paths.variance_dir(EXP))),
        ("report", str(paths.report_dir(EXP))),
    }
    for run in CONFIG.runs:
        for seed in CONFIG.run_seeds(run):
            expected.add((f"train@{run}", str(paths.run_dir(EXP, run, seed))))
            expected.add((f"train@{run}", str(paths.checkpoint_dir(EXP, run, seed))))
    assert folders == expected
    assert len(CONFIG.runs) == 2 and all(CONFIG.run_seeds(r) == [0] for r in CONFIG.runs)


def test_folders_adloco_wrote_pass(outputs):
    assert foreign_files(CONFIG) == []
    assert foreign_files(CONFIG) == []  # and the check changed nothing


USER_FILES = [
    ("prepare-corpus", f"{CONFIG.data.raw_dir}/mine.txt"),
    ("tokenize", f"{paths.tokenized_dir(CONFIG.data.dataset)}/mine.txt"),
    ("pretrain", f"{paths.base_dir(EXP)}/mine.txt"),
    ("pretrain", f"{paths.base_checkpoint_dir(EXP)}/mine.txt"),
    ("variance", f"{paths.variance_dir(EXP)}/mine.txt"),
    (f"train@{RUN}", f"{paths.run_dir(EXP, RUN, 0)}/mine.txt"),
    (f"train@{RUN}", f"{paths.checkpoint_dir(EXP, RUN, 0)}/mine.txt"),
    ("report", f"{paths.report_dir(EXP)}/note.md"),
    ("report", f"{paths.report_figures_dir(EXP)}/mine.png"),
]


@pytest.mark.reliability("dvc")
@pytest.mark.parametrize(("stage", "user_file"), USER_FILES)
def test_a_user_file_in_an_output_folder_is_named(outputs, stage, user_file):
    Path(user_file).write_text("mine\n")
    (problem,) = foreign_files(CONFIG)
    folder = next(f for f in output_folders(CONFIG) if user_file.startswith(f"{f.path}/"))
    name = user_file.removeprefix(f"{folder.path}/")
    assert problem.startswith(f"{stage}: {folder.what} {folder.path}: holds 1 file(s) ")
    assert f"did not write ({name})" in problem
    assert Path(user_file).read_text() == "mine\n"  # refused, kept


@pytest.mark.reliability("dvc")
@pytest.mark.parametrize("entry", ["notes.md", "seed0-old/", "seed12/"])
def test_a_user_file_beside_a_run_s_seed_folders_is_named(outputs, entry):
    # DVC keeps a run's folder of seed folders as a whole: what lies beside the
    # seed folders goes with it, and a folder named like a seed's is checked as one.
    where = paths.run_seeds_dir(EXP, RUN) / entry.rstrip("/")
    if entry.endswith("/"):
        where.mkdir()
        (where / "mine.txt").write_text("mine\n")
    else:
        where.write_text("mine\n")
    (problem,) = foreign_files(CONFIG)
    if entry == "seed12/":  # no manifest: a folder of yours
        assert problem.startswith(f"train@{RUN}: --out {where}: holds 1 file(s) adloco did ")
        assert "(mine.txt)" in problem
    else:
        assert problem == (
            f"train@{RUN}: {where.parent}: holds 1 file(s) or folder(s) beside its seed folders "
            f"that adloco did not write ({entry})"
        )


def test_the_command_refuses_in_one_line_naming_each_file(outputs, capsys):
    config = ROOT / "config/test.yaml"
    assert cli.main(["dvc-check", "--config", str(config)]) == 0
    notes = [paths.report_dir(EXP) / "note.md", paths.run_dir(EXP, RUN, 0) / "mine.txt"]
    for note in notes:
        note.write_text("mine\n")
    capsys.readouterr()
    assert cli.main(["dvc-check", "--config", str(config)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("adloco dvc-check: error: 2 problem(s) before DVC runs: train@")
    assert "(mine.txt)" in line and "(note.md)" in line
    assert line.endswith("move the files out of results/ and data/ (docs/workflow.md, DVC)")
    assert all(note.is_file() for note in notes)


def git(work: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "adloco tests",
        "GIT_AUTHOR_EMAIL": "tests@adloco.invalid",
        "GIT_COMMITTER_NAME": "adloco tests",
        "GIT_COMMITTER_EMAIL": "tests@adloco.invalid",
        "HOME": str(work),
        "PATH": "/usr/bin:/bin",
    }
    result = subprocess.run(
        ["git", *args], cwd=work, env=env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_unsaved_edits_are_those_no_experiment_holds(tmp_path):
    # An experiment is a commit under refs/exps/<HEAD[:2]>/<HEAD[2:]>/<name>, as
    # `dvc exp run` makes it; an edit equal to its file is saved there.
    work = tmp_path
    git(work, "init", "-q")
    for name in ("params.yaml", "dvc.lock", "README.md", "gone.txt"):
        (work / name).write_text(f"{name} at HEAD\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "baseline")
    head = git(work, "rev-parse", "HEAD")
    assert unsaved_edits(work) == []
    (work / "dvc.lock").write_text("dvc.lock of the experiment\n")
    git(work, "commit", "-q", "-am", "experiment")
    git(work, "update-ref", f"refs/exps/{head[:2]}/{head[2:]}/lr", "HEAD")
    git(work, "reset", "-q", "--soft", head)  # the workspace keeps the experiment's dvc.lock
    git(work, "reset", "-q")
    (work / "params.yaml").write_text("params.yaml, edited by hand\n")
    (work / "README.md").write_text("README.md, edited and staged\n")
    git(work, "add", "README.md")
    (work / "gone.txt").unlink()  # apply brings it back: no loss
    (work / "new.txt").write_text("untracked: apply keeps it\n")
    assert sorted(unsaved_edits(work)) == ["README.md", "params.yaml"]
    assert unsaved_edits(tmp_path / "no repository") == []
