"""workflow/bin/adloco: what runs the adloco command of each of dvc.yaml's stages.

DVC runs a stage's command in a shell with the caller's PATH. The script runs
the first ``adloco`` on PATH other than itself, else the checkout's
``.venv/bin/adloco``, else prints one line naming the fix and exits 127 (the
shell's code for a command not found). Each case runs the script itself in a
copy of the checkout's layout with stand-in programs that record what they were
given; the last runs a real ``dvc repro`` of the corpus stage.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "workflow/bin/adloco"
SYSTEM_PATH = "/usr/bin:/bin"
# What the stand-in programs print: who they are, then each argument on a line.
STANDIN = '#!/bin/sh\necho "{name}"\nfor a in "$@"; do echo "$a"; done\nexit {code}\n'


def standin(folder: Path, name: str, code: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "adloco"
    program.write_text(STANDIN.format(name=name, code=code))
    program.chmod(0o755)
    return program


def checkout(tmp_path: Path) -> Path:
    """The script at its place in a checkout without a .venv."""
    root = tmp_path / "checkout"
    (root / "workflow/bin").mkdir(parents=True)
    shutil.copy2(ROOT / SCRIPT, root / SCRIPT)
    return root


def run_script(root: Path, path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SCRIPT, *args],
        cwd=root,
        env={**os.environ, "PATH": path},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_script_git_keeps_is_executable():
    mode = subprocess.run(
        ["git", "ls-files", "-s", SCRIPT], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()[0]
    assert mode == "100755"
    assert os.access(ROOT / SCRIPT, os.X_OK)


def test_the_adloco_on_path_comes_first_with_every_argument_and_its_exit_code(tmp_path):
    root = checkout(tmp_path)
    standin(root / ".venv/bin", "venv")
    standin(tmp_path / "env", "activated", code=3)
    args = ["train", "--out", "a folder with spaces", "", "$HOME", "*"]
    result = run_script(root, f"{tmp_path / 'env'}:{SYSTEM_PATH}", *args)
    assert result.returncode == 3
    assert result.stdout.splitlines() == ["activated", *args]
    assert result.stderr == ""


def test_without_adloco_on_path_the_checkouts_venv_runs_it(tmp_path):
    root = checkout(tmp_path)
    standin(root / ".venv/bin", "venv")
    result = run_script(root, SYSTEM_PATH, "tokenize", "--out", "x")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["venv", "tokenize", "--out", "x"]


def test_without_either_one_line_names_the_checkout_and_the_fix(tmp_path):
    root = checkout(tmp_path)
    result = run_script(root, SYSTEM_PATH, "report")
    assert result.returncode == 127
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"adloco: not on PATH, and no {root.resolve()}/.venv/bin/adloco: run `make setup` in "
        "the repository, or activate an environment that has it (`. .venv/bin/activate`, "
        "`conda activate adloco`), then run dvc again"
    ]


@pytest.mark.parametrize("after", [False, True], ids=["alone", "before another adloco"])
def test_a_path_naming_the_scripts_own_folder_never_runs_it_again(tmp_path, after):
    # workflow/bin on PATH (by a user, or `.` from the checkout's folder): the
    # script skips itself, so it cannot exec itself for ever.
    root = checkout(tmp_path)
    path = f"{root / 'workflow/bin'}:workflow/bin:{SYSTEM_PATH}"
    if after:
        standin(tmp_path / "env", "activated")
        path += f":{tmp_path / 'env'}"
    result = run_script(root, path, "calibrate")
    if after:
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["activated", "calibrate"]
    else:
        assert result.returncode == 127
        assert len(result.stderr.splitlines()) == 1


@pytest.mark.heavy
@pytest.mark.workflow_cli
@pytest.mark.reliability("workflow")
def test_dvc_repro_without_the_venv_on_path_runs_the_checkouts_adloco_or_names_the_fix(
    tmp_path,
):
    # `.venv/bin/dvc repro` with a PATH that lacks .venv/bin. Without a .venv in
    # the checkout, the stage fails in the script's one line (before: the
    # shell's "adloco: not found", exit 127, no fix named); with it, a real
    # `adloco prepare-corpus` writes the corpus.
    from test_pipeline_wiring import DVC, make_copy

    work, env = make_copy(tmp_path, fake=False)
    env["PATH"] = SYSTEM_PATH
    dvc = [DVC, "repro", "--single-item", "prepare-corpus"]
    subprocess.run([DVC, "init", "--no-scm", "-q"], cwd=work, env=env, check=True, timeout=120)
    missing = subprocess.run(
        dvc, cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    output = missing.stdout + missing.stderr
    assert missing.returncode != 0
    assert f"adloco: not on PATH, and no {work.resolve()}/.venv/bin/adloco: run `make" in output
    assert "not found" not in output
    (work / ".venv").symlink_to(Path(DVC).parents[1], target_is_directory=True)
    done = subprocess.run(
        dvc, cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    raw_dir = yaml.safe_load((work / "params.yaml").read_text())["data"]["raw_dir"]
    assert len(list((work / raw_dir).glob("c4-train.*.json.gz"))) >= 1
