"""An output that holds a user's file is refused before any work, and the file is kept.

``adloco pretrain`` and ``adloco variance`` trained all their steps (132 s and
39 s on the test preset) before their folder's swap refused a user's file in
``--out``; ``adloco calibrate --out`` replaced a user's file. Each now refuses
first: the data given here does not exist, so a stage that opened it (or
trained) before its check would fail with another message, and nothing is
written anywhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from adloco.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "config/test.yaml")


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.reliability("ownership")
@pytest.mark.parametrize("stage", ["pretrain", "variance"])
def test_a_users_file_in_out_is_refused_before_any_work(tmp_path, capsys, stage):
    out = tmp_path / "out"
    out.mkdir()
    (out / "NOTES.txt").write_bytes(b"z\n")
    argv = [stage, "--config", CONFIG, "--data", str(tmp_path / "no-data"), "--out", str(out)]
    if stage == "pretrain":
        argv += ["--checkpoints", str(tmp_path / "ckpt"), "--no-progress"]
    assert main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"adloco {stage}: error: --out {out}: holds 1 file(s) adloco did not "
    ), line
    assert "NOTES.txt" in line
    assert _tree(tmp_path) == {"out/NOTES.txt": b"z\n"}  # no checkpoint, nothing else


@pytest.mark.reliability("ownership")
@pytest.mark.parametrize("kind", ["text", "json", "other record", "folder", "link"])
def test_calibrate_keeps_a_file_at_out_that_is_not_its_record(tmp_path, capsys, kind):
    out = tmp_path / "cpu-tiny.json"
    if kind == "text":
        out.write_text("my notes\n")
    elif kind == "json":
        out.write_text(json.dumps({"device": "cpu-tiny", "mine": True}))
    elif kind == "other record":
        out.write_text(json.dumps({"device": "cpu-tiny", "max_batch": "eight"}))
    elif kind == "folder":
        out.mkdir()
        (out / "keep.txt").write_text("z\n")
    else:
        (tmp_path / "real.json").write_text("{}")
        out.symlink_to("real.json")
    before = _tree(tmp_path)
    argv = ["calibrate", "--config", CONFIG, "--data", str(tmp_path / "no-data")]
    assert main([*argv, "--device", "cpu-tiny", "--out", str(out)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"adloco calibrate: error: --out {out}: "), line
    assert line.endswith("or another --out") or line.endswith("or give another --out"), line
    assert _tree(tmp_path) == before
    if kind == "link":
        assert out.is_symlink() and os.readlink(out) == "real.json"


def test_calibrate_replaces_its_own_record(tmp_path):
    # What it wrote passes the check (the data, missing here, is what then stops it).
    from adloco.formats.calibration import WRITTEN_FIELDS, check_replaceable

    out = tmp_path / "cpu-tiny.json"
    out.write_text(
        json.dumps({name: {} for name in WRITTEN_FIELDS} | {"device": "cpu-tiny", "max_batch": 7})
    )
    check_replaceable(out)
