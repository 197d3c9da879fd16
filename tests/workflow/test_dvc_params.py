"""Tests of adloco.dvc.params: params.yaml, the copy of a preset made for DVC."""

from __future__ import annotations

import copy
import os
import shutil

import pytest
import yaml

from adloco.cli import main
from adloco.config import load_config, read_yaml, validate
from adloco.dvc.params import MARK, params_text
from config_edits import ROOT, shipped_configs


@pytest.mark.heavy
@pytest.mark.parametrize("preset", shipped_configs())
def test_the_copy_is_the_preset_with_every_default_written_out(tmp_path, monkeypatch, preset):
    monkeypatch.chdir(ROOT)
    text = params_text(f"config/{preset}")
    assert text.startswith(f"{MARK} --preset config/{preset}`")
    copied = yaml.safe_load(text)
    assert copied == validate(copy.deepcopy(read_yaml(f"config/{preset}")))
    # The stages read the copy as they read the preset.
    (tmp_path / "params.yaml").write_text(text)
    assert load_config(tmp_path / "params.yaml") == load_config(f"config/{preset}")
    # Null written as DVC's `-S` writes it, so an experiment's diff is its settings alone.
    assert ": null" not in text


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder with the shipped presets and params.yaml as the former link to the default."""
    shutil.copytree(ROOT / "config", tmp_path / "config")
    (tmp_path / "params.yaml").symlink_to("config/config.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_choosing_a_preset_replaces_params_yaml_never_the_preset(work):
    default = (work / "config/config.yaml").read_bytes()
    (work / "params.yaml").unlink()  # the former link: see the tests of links below
    assert main(["dvc-params", "--preset", "config/test.yaml"]) == 0
    assert (work / "config/config.yaml").read_bytes() == default
    assert yaml.safe_load((work / "params.yaml").read_text())["experiment"] == "test"
    # The file it wrote (also after `dvc exp run -S`, which keeps the first line) is replaced.
    assert main(["dvc-params"]) == 0
    assert (work / "params.yaml").read_text() == params_text("config/config.yaml")


@pytest.mark.reliability("ownership")
def test_a_link_to_a_preset_is_kept_and_the_preset_untouched(work, capsys):
    # params.yaml's former form, a link to config/config.yaml: neither is replaced.
    default = (work / "config/config.yaml").read_bytes()
    assert main(["dvc-params", "--preset", "config/test.yaml"]) == 1
    assert (work / "params.yaml").is_symlink()
    assert os.readlink(work / "params.yaml") == "config/config.yaml"
    assert (work / "config/config.yaml").read_bytes() == default
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "adloco dvc-params: error: params.yaml: a link to "
    )
    assert "config/config.yaml, a file not written by adloco dvc-params" in err
    assert "remove the link (the file it names is kept) or give another --out" in err


@pytest.mark.reliability("ownership")
def test_a_link_to_a_file_it_wrote_stays_a_link_and_the_file_is_rewritten(work):
    (work / "params.yaml").unlink()
    (work / "mine").mkdir()
    assert main(["dvc-params", "--out", "mine/params.yaml"]) == 0
    (work / "link.yaml").symlink_to("mine/params.yaml")
    assert main(["dvc-params", "--preset", "config/test.yaml", "--out", "link.yaml"]) == 0
    assert (work / "link.yaml").is_symlink()
    assert os.readlink(work / "link.yaml") == "mine/params.yaml"
    assert (work / "mine/params.yaml").read_text() == params_text("config/test.yaml")


@pytest.mark.reliability("ownership")
@pytest.mark.parametrize("to", ["folder", "nothing"])
def test_a_link_to_a_folder_or_to_nothing_is_refused_and_kept(work, capsys, to):
    (work / "folder").mkdir()
    (work / "folder/keep.txt").write_text("z\n")
    (work / "link.yaml").symlink_to(to)
    assert main(["dvc-params", "--preset", "config/test.yaml", "--out", "link.yaml"]) == 1
    assert (work / "link.yaml").is_symlink() and os.readlink(work / "link.yaml") == to
    assert sorted(p.name for p in (work / "folder").iterdir()) == ["keep.txt"]
    assert not (work / "nothing").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "adloco dvc-params: error: --out link.yaml: a link"
    )
    assert "(the link is kept)" in err or "remove the link (it is kept)" in err


@pytest.mark.reliability("configs")
def test_a_params_yaml_of_the_users_is_refused_and_kept(work, capsys):
    (work / "params.yaml").unlink()
    (work / "params.yaml").write_text("experiment: mine\nseed: 3\n")
    assert main(["dvc-params", "--preset", "config/test.yaml"]) == 1
    assert (work / "params.yaml").read_text() == "experiment: mine\nseed: 3\n"
    err = capsys.readouterr().err
    assert err.startswith("adloco dvc-params: error: params.yaml: not written by adloco dvc-params")
    assert "move it away, or give another --out" in err


@pytest.mark.reliability("configs")
def test_a_bad_preset_is_named_and_nothing_is_written(work, capsys):
    text = (work / "config/test.yaml").read_text().replace("seed: 0 ", "seed: -1 ", 1)
    (work / "config/bad.yaml").write_text(text)
    assert main(["dvc-params", "--preset", "config/bad.yaml"]) == 2
    assert (work / "params.yaml").is_symlink()
    err = capsys.readouterr().err
    assert err.startswith(
        "adloco dvc-params: error: config/bad.yaml: invalid configuration: seed: -1 is less than"
    )


@pytest.mark.reliability("configs")
@pytest.mark.parametrize("raw_dir", ["/data/c4", "../c4"])
def test_a_raw_dir_dvc_cannot_keep_is_refused_when_the_preset_is_chosen(work, capsys, raw_dir):
    text = (work / "config/test.yaml").read_text()
    text = text.replace("raw_dir: data/raw/test-tiny ", f"raw_dir: {raw_dir} ", 1)
    assert f"raw_dir: {raw_dir} " in text
    (work / "config/outside.yaml").write_text(text)
    assert main(["dvc-params", "--preset", "config/outside.yaml"]) == 2
    assert (work / "params.yaml").is_symlink()  # nothing written
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"adloco dvc-params: error: data.raw_dir: {raw_dir} is "
    )
    assert "set data.raw_dir to a folder such as data/raw/test-tiny" in err
