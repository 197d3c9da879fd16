"""The profiles' check of the configuration file's YAML before Snakemake reads it."""

from __future__ import annotations

import pytest

from adloco.snakemake_preflight import check_configfiles, configfile_args


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
    good.write_text("seed: 0\n")
    bad.write_text("seed: 0\ntrain:\n  max_rounds: [3\n  inner_steps: 2\n")
    check_configfiles(["--configfile", str(good)])
    with pytest.raises(SystemExit) as stop:
        check_configfiles(["-n", "--configfile", str(bad)])
    assert str(stop.value).startswith(f"snakemake: {bad}: not valid YAML: line 4, column 14: ")
    # Without --configfile: the workflow's default file, when there is one.
    monkeypatch.chdir(tmp_path)
    check_configfiles([])
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text("- a list\n")
    with pytest.raises(SystemExit, match="the top level must be a mapping"):
        check_configfiles(["-n"])
    # A missing file is Snakemake's to report.
    check_configfiles(["--configfile", str(tmp_path / "missing.yaml")])
