"""scripts/clean-results.py: removes one experiment's two folders and nothing else."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("clean_results", ROOT / "scripts/clean-results.py")
clean = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(clean)


def test_the_two_folders_are_the_experiments_own(tmp_path):
    got = clean.folders("default", tmp_path)
    assert got == [(tmp_path / "results/default").resolve(), (tmp_path / "logs/default").resolve()]


@pytest.mark.parametrize("name", ["", "..", "../x", "a/b", "/etc", "a b", ".hidden", "-rf"])
def test_an_odd_name_is_refused_before_anything_is_removed(name, tmp_path):
    with pytest.raises(ValueError, match="not an experiment name"):
        clean.folders(name, tmp_path)


def test_the_command_refuses_an_empty_name_in_one_line():
    done = subprocess.run([sys.executable, str(ROOT / "scripts/clean-results.py"), ""],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "not an experiment name" in done.stderr


def test_make_clean_results_calls_it_with_the_name():
    done = subprocess.run(["make", "-n", "clean-results", "EXPERIMENT=test", "STAMP="],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert 'scripts/clean-results.py "test"' in done.stdout
