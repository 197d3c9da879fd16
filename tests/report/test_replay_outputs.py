"""``adloco regimes`` writes its files all or nothing, beside the other files of ``--out``."""

from __future__ import annotations

import pytest

from adloco.cli import main
from disk_faults import full_disk

WRITTEN = ["regimes.csv", "regimes.json", "figures/regimes.png", "figures/regime_map.png"]


def contents(folder) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
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
    (out / "calibrate.yaml").write_text("the replay script's file\n")  # not regimes' own
    before = contents(out)
    assert sorted(before) == sorted([*WRITTEN, "calibrate.yaml"])
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
    # Written again with room: every file of the new device, the other file kept.
    assert regimes(engine_fixture, out, "slow=0.01,2") == 0
    after = contents(out)
    assert all(after[name] != before[name] for name in WRITTEN[:2])
    assert after["calibrate.yaml"] == before["calibrate.yaml"]
