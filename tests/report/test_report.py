"""``adloco report`` as steps (report/__init__.py): the tables, claims.json, the page."""

from __future__ import annotations

import base64
import csv
import json

import pytest
from results_folder import report_request

from adloco.report import FIGURE_NAMES, build_report, claims_document, write_tables


@pytest.mark.heavy
def test_the_steps_write_what_build_report_writes(engine_report, engine_fixture, tmp_path):
    inputs, found, page = engine_report
    write_tables(tmp_path / "steps", inputs, found)
    with open(tmp_path / "steps" / "summary.csv", newline="") as fh:
        summary = list(csv.DictReader(fh))
    # One row per run and seed: five runs of three seeds.
    assert len(summary) == len(inputs.runs) == 15
    assert sorted(p.name for p in (tmp_path / "steps").iterdir()) == [
        "curves.csv", "ladder.csv", "noise_scale.csv", "regimes.csv", "summary.csv",
    ]  # fmt: skip
    f = engine_fixture
    out = tmp_path / "whole"
    data = inputs.base.folder.parent / "data"  # written beside the base (conftest.py)
    doc = build_report(report_request(f, out, data=data, base=inputs.base.folder))
    assert json.loads(json.dumps(claims_document(inputs, found))) == json.loads(
        (out / "claims.json").read_text()
    )
    assert doc["target_perplexity"] == found.ladder.main == 47.2
    for name in ("summary.csv", "curves.csv", "ladder.csv", "regimes.csv", "noise_scale.csv"):
        assert (out / name).read_bytes() == (tmp_path / "steps" / name).read_bytes()
    # Every figure's file, one not drawn saying so: dvc.yaml names each as an output.
    written = sorted(p.name for p in (out / "figures").iterdir())
    assert written == sorted(f"{name}.png" for name in FIGURE_NAMES)
    page = (out / "index.html").read_text()
    undrawn = (out / "figures" / "workers_map.png").read_bytes()  # no splits in the fixture
    assert undrawn.startswith(b"\x89PNG") and base64.b64encode(undrawn).decode() not in page


@pytest.mark.heavy
@pytest.mark.reliability("disk-full")
def test_a_report_that_fails_part_way_leaves_the_previous_one_whole(
    engine_fixture, tmp_path, monkeypatch
):
    import errno

    import adloco.report as report

    f = engine_fixture
    out = tmp_path / "report"
    request = report_request(f, out)
    build_report(request)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def full_disk(_page):
        # After the tables, claims.json and the figures were written: the page's turn.
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "render_page", full_disk)
    with pytest.raises(OSError):
        build_report(request)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # every file the previous report's, index.html and claims.json too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no temporary left


@pytest.mark.reliability("configs")
def test_a_report_folder_holding_a_users_file_is_refused_before_any_work(
    engine_fixture, tmp_path, monkeypatch
):
    import adloco.report as report

    out = tmp_path / "report"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    monkeypatch.setattr(report, "read_inputs", lambda *a: pytest.fail("read the inputs"))
    f = engine_fixture
    with pytest.raises(ValueError, match=r"--out .*report: holds 1 file\(s\) .*\(notes.txt\)"):
        build_report(report_request(f, out))
    assert (out / "notes.txt").read_text() == "mine"
