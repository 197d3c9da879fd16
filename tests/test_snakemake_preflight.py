"""The profiles' check of the configuration file before Snakemake reads it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from adloco_workflow.snakemake_preflight import (
    check_configfiles,
    config_args,
    configfile_args,
    put_adloco_on_path,
)

TEST_PRESET = Path(__file__).parents[1] / "config" / "test.yaml"


@pytest.mark.parametrize(
    ("argv", "files"),
    [
        (["-n", "--configfile", "a.yaml", "--cores", "2"], ["a.yaml"]),
        (["--configfiles", "a.yaml", "b c.yaml"], ["a.yaml", "b c.yaml"]),
        (["--configfile=a.yaml", "-n"], ["a.yaml"]),
        (["--cores", "all"], []),
    ],
)
def test_configfile_args(argv, files):
    assert configfile_args(argv) == files


def test_a_syntax_error_stops_with_file_and_line(tmp_path, monkeypatch):
    good, bad = tmp_path / "good.yaml", tmp_path / "bad copy.yaml"
    good.write_text(TEST_PRESET.read_text())
    bad.write_text("seed: 0\ntrain:\n  max_rounds: [3\n  inner_steps: 2\n")
    check_configfiles(["--configfile", str(good)])
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["-n", "--configfile", str(bad)])
    assert str(stop.value).startswith(
        f"snakemake: error: {bad}: not valid YAML: line 4, column 14: "
    )
    # Without --configfile: the workflow's default file, when there is one.
    monkeypatch.chdir(tmp_path)
    check_configfiles([])
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text("- a list\n")
    with pytest.raises(SystemExit, match="the top level must be a mapping"):
        check_configfiles(["-n"])


@pytest.mark.reliability("configs")
def test_a_missing_configfile_stops_in_one_line_with_what_to_do(tmp_path):
    # Where Snakemake itself would end in a FileNotFoundError traceback.
    missing = tmp_path / "missing.yaml"
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["-n", "--configfile", str(missing), "--cores", "1"])
    assert str(stop.value) == (
        f"snakemake: error: --configfile {missing}: no such file; pass the path of a "
        "configuration file (config/config.yaml, config/test.yaml, or a copy of one), "
        "relative to the folder Snakemake runs in"
    )


@pytest.mark.reliability("configs")
@pytest.mark.parametrize("option", ["--configfile", "--configfiles"])
def test_a_target_after_configfile_stops_saying_to_write_it_first(option):
    # Snakemake's --configfile takes every word up to the next option: `all` is read as a
    # second configuration file.
    preset = str(TEST_PRESET)
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["-n", option, preset, "all"])
    assert str(stop.value) == (
        f"snakemake: error: --configfile {preset} all: all is no file; Snakemake reads every "
        "word after --configfile as a configuration file, so a target written after it is "
        "taken for one: write the targets before --configfile "
        f"(snakemake all --configfile {preset})"
    )
    # Written first, or after an option, the target is no configuration file.
    check_configfiles(["-n", "all", option, preset])
    check_configfiles(["-n", f"{option}={preset}", "all"])
    check_configfiles(["-n", option, preset, "--cores", "1", "all"])


@pytest.mark.parametrize(
    ("argv", "values"),
    [
        (
            ["-n", "--config", "seed=1", "train.inner_lr=2", "--cores", "2"],
            ["seed=1", "train.inner_lr=2"],
        ),
        (["-C", "seed=1"], ["seed=1"]),
        (["--config=seed=1"], ["seed=1"]),
        (["--configfile", "a.yaml"], []),
    ],
)
def test_config_args(argv, values):
    assert config_args(argv) == values


def test_config_on_the_command_line_stops_in_one_line():
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["-n", "--config", "seed=1"])
    message = str(stop.value)
    assert message.startswith("snakemake: error: --config seed=1: the configuration file is ")
    assert "\n" not in message and "--configfile" in message


def test_an_invalid_value_stops_naming_file_and_key(tmp_path):
    config = tmp_path / "variant.yaml"
    config.write_text(TEST_PRESET.read_text().replace("inner_steps: 2 ", "inner_steps: -2 "))
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["--configfile", str(config)])
    message = str(stop.value)
    assert message.startswith(f"snakemake: error: {config}: invalid configuration: ")
    assert "train.inner_steps" in message and "\n" not in message


def test_a_raw_folder_adloco_did_not_write_stops_before_snakemake_empties_it(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    config = tmp_path / "variant.yaml"
    config.write_text(
        TEST_PRESET.read_text().replace("raw_dir: data/raw/test-tiny", f"raw_dir: {home}")
    )
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["--configfile", str(config)])
    assert "data.raw_dir" in str(stop.value) and "thesis.tex" in str(stop.value)
    assert (home / "thesis.tex").read_text() == "years of work"


@pytest.mark.reliability("configs")
@pytest.mark.parametrize(
    ("folder", "inside", "writer", "what"),
    [
        (
            "results/test/runs/diloco/seed0/final",
            "",
            "adloco train",
            "run diloco seed 0's final model",
        ),
        (
            "results/test/report",
            "figures/",
            "adloco report",
            "the report's folder (with its figures/)",
        ),
    ],
)
def test_a_directory_output_holding_a_users_file_stops_before_snakemake_empties_it(
    tmp_path, monkeypatch, folder, inside, writer, what
):
    # Snakemake removes a directory() output before its job (--forcerun train report):
    # a user's notes in one would be gone.
    from adloco.core.io import atomic_dir

    monkeypatch.chdir(tmp_path)
    with atomic_dir(tmp_path / folder, writer) as tmp:
        (tmp / inside / "kept.png").parent.mkdir(parents=True, exist_ok=True)
        (tmp / inside / "kept.png").write_text("a figure or model file adloco wrote")
    (tmp_path / folder / inside / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["--configfile", str(TEST_PRESET)])
    message = str(stop.value)
    assert f"{what} {folder}: holds 1 file(s) adloco did not write ({inside}notes.txt)" in message
    assert "\n" not in message and (tmp_path / folder / inside / "notes.txt").read_text() == "mine"
    (tmp_path / folder / inside / "notes.txt").unlink()
    check_configfiles(["--configfile", str(TEST_PRESET)])  # adloco's own files alone: no stop


def test_the_adloco_beside_snakemakes_python_goes_first_on_path_when_missing(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    environ = {"PATH": f"/usr/bin{os.pathsep}/bin"}
    # No adloco beside that Python (a Snakemake-only host): PATH is left as it is.
    assert put_adloco_on_path(environ) is None
    assert environ == {"PATH": f"/usr/bin{os.pathsep}/bin"}
    (bin_dir / "adloco").write_text("#!/bin/sh\n")
    (bin_dir / "adloco").chmod(0o755)
    assert put_adloco_on_path(environ) == str(bin_dir)
    assert environ["PATH"] == os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])
    # Already on PATH, wherever the user put it: left alone.
    environ = {"PATH": os.pathsep.join(["/opt/other/bin", str(bin_dir)])}
    assert put_adloco_on_path(environ) is None
    assert environ["PATH"] == os.pathsep.join(["/opt/other/bin", str(bin_dir)])
    # No PATH at all: the folder alone.
    environ = {}
    assert put_adloco_on_path(environ) == str(bin_dir) and environ["PATH"] == str(bin_dir)
