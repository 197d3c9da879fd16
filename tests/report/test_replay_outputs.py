"""``adloco regimes`` writes its folder whole: a new one swapped in, never old and new mixed."""

from __future__ import annotations

import os
import shutil

import pytest

from adloco.cli import main
from adloco.core import io
from disk_faults import full_disk

WRITTEN = ["regimes.csv", "regimes.json", "figures/regimes.png", "figures/regime_map.png"]


def contents(folder) -> dict[str, bytes]:
    """Every file of ``folder`` but adloco's manifest, by relative path."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name != io.OWNED_LIST
    }


def regimes(engine_fixture, out, roofline: str) -> int:
    f = engine_fixture
    args = ["--config", str(f / "config.yaml"), "--runs", str(f / "runs")]
    args += ["--calibration", str(f / "calibration"), "--roofline", roofline]
    return main(["regimes", *args, "--out", str(out)])


@pytest.mark.reliability("disk-full")
def test_a_full_disk_at_the_last_figure_leaves_the_previous_files_whole(
    engine_fixture, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "replay" / "my-gpu"
    assert regimes(engine_fixture, out, "fast=0.001,8") == 0
    before = contents(out)
    assert sorted(before) == sorted(WRITTEN)
    capsys.readouterr()
    # The map is written last, into a temporary folder beside --out.
    with full_disk(out.parent, ("regime_map.png",), monkeypatch):
        # Another device: every file would change; the map, written last, fails.
        assert regimes(engine_fixture, out, "slow=0.01,2") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("adloco regimes: error: "), err
    assert f"no space left to write {out / 'figures' / 'regime_map.png'} (" in err, err
    assert contents(out) == before
    assert [p.name for p in out.parent.iterdir()] == ["my-gpu"]  # no temporary left
    # Written again with room: every file of the new device.
    assert regimes(engine_fixture, out, "slow=0.01,2") == 0
    after = contents(out)
    assert sorted(after) == sorted(WRITTEN)
    assert all(after[name] != before[name] for name in WRITTEN[:2])


class Killed(BaseException):
    """The process killed: nothing after it runs, no clean-up either."""


# Where the swap is killed: before its first rename (--out aside), after it, after the
# second (the new folder in).
KILL_POINTS = ["before moving --out aside", "after moving --out aside", "after moving the new in"]


@pytest.mark.reliability("kills")
@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_kill_during_the_swap_leaves_the_old_or_the_new_files_whole(
    engine_fixture, tmp_path, monkeypatch, point
):
    out = tmp_path / "replay" / "my-gpu"
    assert regimes(engine_fixture, out, "fast=0.001,8") == 0
    old = contents(out)
    reference = tmp_path / "reference"  # what the new replay writes, uninterrupted
    assert regimes(engine_fixture, reference, "slow=0.01,2") == 0
    new = contents(reference)
    assert all(new[name] != old[name] for name in WRITTEN[:2])
    rename, remove = os.replace, shutil.rmtree
    killed = []

    def replace(src, dst):
        aside, new_in = str(src) == str(out), str(dst) == str(out)
        if point == KILL_POINTS[0] and aside:
            killed.append(True)
            raise Killed
        rename(src, dst)
        if (point == KILL_POINTS[1] and aside) or (point == KILL_POINTS[2] and new_in):
            killed.append(True)
            raise Killed

    def rmtree(path, *args, **kwargs):
        if not killed:  # a killed process removes nothing
            remove(path, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(io.os, "replace", replace)
        patch.setattr(io.shutil, "rmtree", rmtree)
        with pytest.raises(Killed):
            regimes(engine_fixture, out, "slow=0.01,2")
    assert killed == [True]
    # --out is the old replay whole, or the new one whole, or (between the two renames)
    # absent, the old one whole in adloco's temporary beside it: never old and new mixed.
    beside = [p for p in out.parent.iterdir() if p != out]
    assert all(io.is_own_temporary(out.name, p.name) for p in beside)
    whole = {point: old for point in KILL_POINTS[:2]} | {KILL_POINTS[2]: new}
    if out.exists():
        assert contents(out) == whole[point]
    else:
        assert point == KILL_POINTS[1]
        assert old in [contents(p) for p in beside]
    # The next run writes the new replay whole and removes what the kill left.
    assert regimes(engine_fixture, out, "slow=0.01,2") == 0
    assert contents(out) == new
    assert [p.name for p in out.parent.iterdir()] == ["my-gpu"]


@pytest.mark.reliability("replay inputs")
@pytest.mark.parametrize("where", ["the report folder", "inside it", "another stage's folder"])
def test_an_out_that_is_a_report_or_another_stages_folder_is_refused(
    engine_fixture, tmp_path, capsys, where
):
    report = tmp_path / "report"
    report.mkdir()
    files = {"index.html": b"<html>the page</html>", "claims.json": b"{}", "regimes.csv": b"x\n"}
    for name, data in files.items():
        (report / name).write_bytes(data)
    io.write_manifest(report, "adloco report")
    out = {"the report folder": report, "inside it": report / "figures" / "mine"}.get(where)
    if out is None:  # a variance folder
        out = tmp_path / "variance"
        with io.atomic_dir(out, "adloco variance") as tmp:
            (tmp / "variance.json").write_text("{}")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert regimes(engine_fixture, out, "fast=0.001,8") == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"adloco regimes: error: --out {out}: "), line
    if where == "another stage's folder":
        assert "written by adloco variance, not adloco regimes" in line, line
    else:
        inside = "" if out == report else f"inside {report}, "
        assert f": is {inside}a report folder adloco report wrote (index.html, claims.json)" in (
            line
        ), line
        assert "write the replay to a folder of its own" in line, line
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (report / "figures").exists()
