"""The workers × local batch map: DiLoCo's splits of ddp's global batch, by hand."""

from __future__ import annotations

import json
import math

import pytest
from results_folder import report_request

from adloco.config import load_config
from adloco.report import build_report
from adloco.report.analysis.gain import gain_shares
from adloco.report.analysis.workers_map import workers_map
from adloco.report.figures.workers_map_figure import workers_map_figure
from adloco.report.inputs.results import load_runs
from adloco.report.settings import assign_roles

BASE = 100.0


def split(ppls, workers, local, global_batch=16):
    return [[{"ppl": p, "nodes": workers, "local_batch": local, "req": global_batch}] for p in ppls]


def runs(ws):
    """Base 100; ddp ends at 50. DiLoCo splits of the global batch of 16:
    4 x 4 (the headline run) ends at 80, 1 x 16 at 60, 16 x 1 at 90 (median of 3 seeds).
    Not on the map: diloco-h5 (another H), diloco-big (a global batch of 32).
    """
    three = range(3)
    ws.run("ddp", {"method": "ddp"}, {s: split([90, 50], 4, 4) for s in three})
    ws.run("diloco", {"method": "diloco"},
           {s: split([95, p], 4, 4) for s, p in zip(three, (79, 80, 81), strict=True)})  # fmt: skip
    ws.run("diloco-w1", {"method": "diloco", "nodes_per_device": 1, "initial_batch": 16},
           {s: split([90, p], 1, 16) for s, p in zip(three, (60, 59, 61), strict=True)},
           )  # fmt: skip
    ws.run("diloco-w16", {"method": "diloco", "nodes_per_device": 8, "initial_batch": 1},
           {s: split([99, 90], 16, 1) for s in three})  # fmt: skip
    ws.run("diloco-h5", {"method": "diloco", "inner_steps": 5},
           {s: split([95, 70], 4, 4) for s in three})  # fmt: skip
    ws.run("diloco-big", {"method": "diloco", "initial_batch": 8},
           {s: split([95, 70], 4, 8, 32) for s in three})  # fmt: skip
    adloco = [
        [{"ppl": ppl, "nodes": 2, "local_batch": b}] for ppl, b in ((96, 4), (85, 8), (75, 20))
    ]
    ws.run("adloco", ws.FULL_ADLOCO, {s: adloco for s in three})


def test_the_map_has_every_split_of_ddps_batch_and_nothing_else(workspace):
    runs(workspace)
    config = load_config(workspace.write([60]))
    loaded = load_runs(workspace.runs_dir, config)
    found = workers_map(loaded, "diloco", "ddp", "adloco", gain_shares(loaded, "ddp", BASE), 51.4)
    assert found.global_batch == 16 and found.note == ""
    assert [(p.run, p.workers, p.local_batch, p.final, p.seeds) for p in found.points] == [
        ("diloco-w1", 1, 16, 60.0, 3),
        ("diloco", 4, 4, 80.0, 3),
        ("diloco-w16", 16, 1, 90.0, 3),
    ]
    full = math.log(100 / 50)
    shares = [p.share for p in found.points]
    assert shares == pytest.approx([math.log(100 / 60) / full, math.log(100 / 80) / full,
                                    math.log(100 / 90) / full])  # fmt: skip
    # Climb: the highest evaluation over the base, median over seeds (w16 starts at 99).
    assert [p.climb for p in found.points] == pytest.approx([0.9, 0.95, 0.99])
    assert found.adloco_batches == [4.0, 8.0, 20.0] * 3
    assert found.adloco_final == 75.0
    assert found.adloco_share == pytest.approx(math.log(100 / 75) / full)
    assert found.as_dict()["adloco_batches"] == {"min": 4.0, "median": 8.0, "max": 20.0}
    assert workers_map_figure(found).startswith(b"\x89PNG")


def test_a_map_run_that_splits_as_the_headline_run_does_is_one_point(workspace):
    runs(workspace)
    # diloco-w4 is the headline diloco (4 x 4) but for how its lr is stated: one point.
    workspace.run("diloco-w4", {"method": "diloco", "nodes_per_device": 4, "initial_batch": 4},
                  {s: split([95, 70], 4, 4) for s in range(3)})  # fmt: skip
    config = load_config(workspace.write([60]))
    loaded = load_runs(workspace.runs_dir, config)
    found = workers_map(loaded, "diloco", "ddp", "adloco", gain_shares(loaded, "ddp", BASE), 51.4)
    assert [(p.run, p.workers, p.local_batch) for p in found.points] == [
        ("diloco-w1", 1, 16), ("diloco", 4, 4), ("diloco-w16", 16, 1),
    ]  # fmt: skip


def test_runs_on_their_own_node_slots_are_not_baselines(workspace):
    runs(workspace)
    config = load_config(workspace.write([60]))
    roles = assign_roles(config.report, {n: e.settings for n, e in config.runs.items()})
    assert sorted(roles.baselines) == ["diloco-big", "diloco-h5"]


def test_without_two_splits_or_an_anchor_there_is_no_map(workspace):
    runs(workspace)
    config = load_config(workspace.write([60]))
    loaded = [r for r in load_runs(workspace.runs_dir, config) if r.run not in
              ("diloco-w1", "diloco-w16")]  # fmt: skip
    found = workers_map(loaded, "diloco", "ddp", "adloco", gain_shares(loaded, "ddp", BASE), None)
    assert [p.run for p in found.points] == ["diloco"]
    assert found.note.startswith("fewer than two DiLoCo runs that split ddp's global batch of 16")
    assert workers_map_figure(found) is None
    assert workers_map(
        loaded, "diloco", None, None, gain_shares(loaded, None, BASE), None
    ).note == ("needs a DiLoCo run and a ddp run")


@pytest.mark.heavy
def test_the_report_shows_the_map_on_the_first_screen_and_in_claims_json(workspace, tmp_path):
    runs(workspace)
    ws = workspace
    config = ws.write(targets_section={"relative_to": "base", "levels": [0.9], "main": 0.9})
    out = tmp_path / "report"
    build_report(report_request(ws.root, out, config=config, base=ws.base(BASE)))
    doc = json.loads((out / "claims.json").read_text())
    assert [p["run"] for p in doc["workers_map"]["points"]] == ["diloco-w1", "diloco",
                                                                "diloco-w16"]  # fmt: skip
    page = (out / "index.html").read_text()
    answer = page[page.index("id='answer'") : page.index("id='claims'")]
    assert "(workers × local batch): 1 × 16: 74%, 4 × 4: 32%, 16 × 1: 15%" in answer
    assert "local batch runs 4 – 20 (<a href='#workers'>map</a>)" in answer
    assert (out / "figures" / "workers_map.png").read_bytes().startswith(b"\x89PNG")


def test_the_map_is_the_largest_group_of_one_effective_lr(workspace):
    """The map's runs state their lr otherwise (lr_scaling none) and step at ddp's lr,
    0.00075; the headline diloco steps at 0.003 x 0.5 = 0.0015: not on the map."""

    def held(ppls, workers, local, scale):
        rows = split(ppls, workers, local)
        rows[0][0]["lr_scale"] = scale
        return rows

    three = range(3)
    workspace.run("ddp", {"method": "ddp"}, {s: split([90, 50], 4, 4) for s in three})
    workspace.run("diloco", {"method": "diloco", "inner_lr": 0.003},
                  {s: held([95, 80], 4, 4, 0.5) for s in three})  # fmt: skip
    for name, workers, local, ppl in (("w1", 1, 16, 60), ("w4", 4, 4, 82), ("w16", 16, 1, 90)):
        workspace.run(
            f"diloco-{name}",
            {"method": "diloco", "nodes_per_device": workers, "initial_batch": local,
             "inner_lr": 0.00075, "lr_scaling": "none"},
            {s: held([95, ppl], workers, local, 1.0) for s in three},
        )  # fmt: skip
    config = load_config(workspace.write([60]))
    loaded = load_runs(workspace.runs_dir, config)
    found = workers_map(loaded, "diloco", "ddp", None, gain_shares(loaded, "ddp", BASE), None)
    assert [(p.run, p.workers, p.local_batch, p.final) for p in found.points] == [
        ("diloco-w1", 1, 16, 60.0),
        ("diloco-w4", 4, 4, 82.0),
        ("diloco-w16", 16, 1, 90.0),
    ]
    assert found.effective_lr == pytest.approx(0.00075)
    assert found.as_dict()["effective_lr"] == pytest.approx(0.00075)
