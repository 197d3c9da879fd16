"""scripts/generated-check.py (`make generated-check`): generated files match their sources."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "generated-check.py"
SCHEMA = "src/adloco/schemas/config.schema.yaml"
# The checked-in generated files (scripts/generated-check.py's GENERATED).
GENERATED = (
    "dvc.yaml",
    SCHEMA,
    "params.yaml",
    "config/tune.yaml",
    "config/pilot.yaml",
    "environment.yml",
    "workflow/envs/adloco.yaml",
)


def check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def copy_of_generated(tmp_path: Path) -> Path:
    """A folder holding copies of the checked-in generated files, as the repository lays them."""
    for name in (*GENERATED, "requirements.lock", "pyproject.toml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    return tmp_path


def test_the_checked_in_generated_files_match_their_sources():
    result = check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in result.stderr
    # The seven files, each either compared or skipped with a reason.
    checked = result.stdout.count("skipped, no ") + int(
        result.stdout.split("generated-check: ")[-1].split()[0]
    )
    assert checked == len(GENERATED), result.stdout
    for name in GENERATED:
        assert (ROOT / name).is_file(), name


def test_an_altered_dvc_yaml_fails_naming_the_file(tmp_path):
    root = copy_of_generated(tmp_path)
    dvc_yaml = root / "dvc.yaml"
    lines = dvc_yaml.read_text().splitlines(keepends=True)
    lines.remove("            - train.grad_clip_norm\n")  # calibrate's last key
    dvc_yaml.write_text("".join(lines))
    result = check("--root", str(root))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [
        "generated-check: error: dvc.yaml: differs from its source; "
        "run `python workflow/lib/adloco_workflow/dvc_yaml.py`"
    ]
    # The difference is shown, and the checked-in file of the repository is untouched.
    assert "\n+            - train.grad_clip_norm\n" in result.stdout
    assert (ROOT / "dvc.yaml").read_text() != dvc_yaml.read_text()


def test_a_missing_generated_file_fails_naming_it(tmp_path):
    root = copy_of_generated(tmp_path)
    (root / "dvc.yaml").unlink()
    result = check("--root", str(root))
    assert result.returncode == 1
    assert "generated-check: error: dvc.yaml: differs from its source" in result.stderr


def test_a_params_yaml_behind_the_defaults_fails_naming_it(tmp_path):
    # params.yaml writes every default out: a setting whose default changed, or a new
    # one, leaves the checked-in copy behind until `adloco dvc-params` writes it again.
    root = copy_of_generated(tmp_path)
    params = root / "params.yaml"
    text = params.read_text()
    assert "  stats_min_dof: 16\n" in text
    params.write_text(text.replace("  stats_min_dof: 16\n", "  stats_min_dof: 8\n"))
    result = check("--root", str(root))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == [
        "generated-check: error: params.yaml: differs from its source; run `adloco dvc-params`"
    ]
    assert "\n+  stats_min_dof: 16\n" in result.stdout


@pytest.mark.reliability("messages")
def test_params_yaml_of_another_preset_is_named_as_such(tmp_path):
    # Issue 45: after the documented `adloco dvc-params --preset config/test.yaml`
    # the check asked to run `adloco dvc-params`, the command just run.
    root = copy_of_generated(tmp_path)
    (root / "config").mkdir(exist_ok=True)
    shutil.copy2(ROOT / "config" / "test.yaml", root / "config" / "test.yaml")
    made = subprocess.run(
        [str(Path(sys.executable).parent / "adloco"), "dvc-params", "--preset",
         "config/test.yaml"],
        cwd=root, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert (
        (root / "params.yaml")
        .read_text()
        .startswith("# Made by `adloco dvc-params --preset config/test.yaml`")
    )
    result = check("--root", str(root))
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if "params.yaml" in line]
    assert errors == [
        "generated-check: error: params.yaml: made by `adloco dvc-params --preset "
        "config/test.yaml` (a preset chosen for DVC), where the repository keeps "
        "config/config.yaml's copy; to commit it or pass this check, run `adloco dvc-params "
        "--preset config/config.yaml`"
    ]


@pytest.mark.reliability("messages")
def test_a_missing_root_is_named_not_reported_as_differing_files(tmp_path):
    missing = tmp_path / "no-such-copy"
    result = check("--root", str(missing))
    assert result.returncode == 2
    assert result.stderr == (
        f"generated-check: error: --root {missing}: no such folder; give a copy of the "
        "repository (default: this checkout)\n"
    )
    assert "differs" not in result.stdout + result.stderr and not missing.exists()
