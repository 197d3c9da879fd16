"""The tuning record: written by the tuning experiment's report, shown by the default's."""

from __future__ import annotations

import json

import pytest

from adloco.config import ConfigError, load_config
from adloco.report import build_report
from adloco.report.inputs import load_runs
from adloco.report.tuning import choose, load_tuning, tuning_record, tuning_table

BASE = 100.0


def curve(ppls, scale=1.0):
    """One trainer per round; the first round logs its lr scale."""
    rows = [[{"ppl": p}] for p in ppls]
    rows[0][0]["lr_scale"] = scale
    return rows


def grid(ws):
    """diloco at four points of inner lr × outer lr × Nesterov, seeds 0-2 (base 100).

    Final perplexities (median) and highest evaluations (median climb):
    i0.001-o0.5:  70 (70, 71, 69), climb 0.99
    i0.003-o0.5:  60 (61, 60, 59), climb 0.99
    i0.003-o1.0:  60 (58, 60, 62), climb 0.99  -> ties with the one above: the smaller outer lr
    i0.01-o0.7-n: 50 (50, 50, 50), climb 1.10  -> the lowest, but above the 1.02 limit
    The lr scale of the first round is 0.5: effective lrs 0.0005, 0.0015, 0.0015, 0.005.
    """
    points = {
        ("diloco-a", 0.001, 0.5, 0.0): [70, 71, 69],
        ("diloco-b", 0.003, 0.5, 0.0): [61, 60, 59],
        ("diloco-c", 0.003, 1.0, 0.0): [58, 60, 62],
        ("diloco-d", 0.01, 0.7, 0.9): [50, 50, 50],
    }
    for (name, inner, outer, momentum), finals in points.items():
        first = 110.0 if name == "diloco-d" else 99.0
        settings = {"method": "diloco", "inner_lr": inner, "outer_lr": outer}
        if momentum:
            settings.update(outer_momentum=momentum, nesterov=True)
        ws.run(
            name, settings, {s: curve([first, 95, 96, 94, p], 0.5) for s, p in enumerate(finals)}
        )
    # adloco reaches 0.95 x the base (95) at round 2 of 5 and stays; 0.9 only at round 5.
    ws.run("adloco-a", {**ws.FULL_ADLOCO, "inner_lr": 0.003},
           {s: curve([99, 94, 93, 92, 89]) for s in range(3)})  # fmt: skip
    ws.base(BASE)


GROUPS = {"diloco": ("diloco-d", "diloco-c", "diloco-a", "diloco-b"), "adloco": ("adloco-a",)}


def record_of(ws, **report):
    config = load_config(
        ws.write(
            targets_section={"relative_to": "base", "levels": [0.99, 0.95, 0.9, 0.6], "main": 0.95},
            tuning_groups={k: list(v) for k, v in GROUPS.items()},
            **report,
        )
    )
    return tuning_record(config, load_runs(ws.runs_dir, config), GROUPS, BASE)


def test_the_choice_is_the_lowest_final_within_the_climb_limit(workspace):
    grid(workspace)
    diloco = record_of(workspace, tuning_max_climb=1.02)["groups"]["diloco"]
    points = {p["run"]: p for p in diloco["points"]}
    assert [p["run"] for p in diloco["points"]] == ["diloco-a", "diloco-b", "diloco-c", "diloco-d"]
    assert [points[n]["value"] for n in ("diloco-a", "diloco-b", "diloco-c", "diloco-d")] == [
        70.0, 60.0, 60.0, 50.0
    ]  # fmt: skip
    assert points["diloco-d"]["climb"] == pytest.approx(1.10)
    assert points["diloco-a"]["climb"] == pytest.approx(0.99)
    assert points["diloco-b"]["effective_inner_lr"] == pytest.approx(0.0015)
    assert points["diloco-d"]["effective_inner_lr"] == pytest.approx(0.005)
    # d is lowest but climbs 1.10 > 1.02; b and c tie at 60: the smaller outer lr.
    assert diloco["chosen_run"] == "diloco-b" and diloco["within_max_climb"]
    assert diloco["chosen"] == {"inner_lr": 0.003, "outer_lr": 0.5, "outer_momentum": 0.0,
                                "nesterov": False}  # fmt: skip
    assert diloco["varied"] == ["inner_lr", "outer_lr", "outer_momentum", "nesterov"]


def test_without_a_limit_the_lowest_final_is_chosen(workspace):
    grid(workspace)
    assert record_of(workspace)["groups"]["diloco"]["chosen_run"] == "diloco-d"
    # A limit no point meets: the lowest of all, flagged.
    steps = {"inner_lr": 0.001, "outer_lr": 1.0, "outer_momentum": 0.0, "nesterov": False}
    points = [{**steps, "run": "x", "value": 60.0, "climb": 1.2},
              {**steps, "run": "y", "value": 50.0, "climb": 1.1}]  # fmt: skip
    assert choose(points, 1.05) == (points[1], False)
    assert choose(points, 1.15) == (points[1], True)
    assert choose(points, 1.1) == (points[1], True)  # at the limit: within


def test_the_suggested_main_target_is_reached_early_enough_by_every_chosen_point(workspace):
    grid(workspace)
    main = record_of(workspace, tuning_max_climb=1.02)["main_target"]
    # Rounds of 100 tokens, 500 in all: within 0.75 is round 3 or earlier. diloco-b
    # (99, 95, 96, 94, ~60) is at or below 95 from round 2, but 96 at round 3 means it
    # stays below only from round 4: too late; 99 from round 1. adloco-a (99, 94, 93,
    # 92, 89): 95 from round 2, 90 only at round 5. Common and early enough: 0.99.
    assert main["runs"] == ["adloco-a", "diloco-b"]
    assert main["reached"] == {"diloco-b": [0.99], "adloco-a": [0.99, 0.95]}
    assert main["level"] == 0.99


def test_unknown_runs_and_a_limit_without_base_are_refused(workspace):
    grid(workspace)
    config = load_config(workspace.write([60], tuning_groups={"adloco": ["adloco-a"]},
                                         tuning_max_climb=1.02))  # fmt: skip
    runs = load_runs(workspace.runs_dir, config)
    with pytest.raises(ConfigError, match="report.tuning_groups.adloco: no run named nope"):
        tuning_record(config, runs, {"adloco": ("nope",)}, BASE)
    with pytest.raises(ConfigError, match="tuning_max_climb needs the base"):
        tuning_record(config, runs, {"adloco": ("adloco-a",)}, None)


def test_build_report_writes_tuning_json_and_the_default_shows_it(workspace, tmp_path):
    grid(workspace)
    ws = workspace
    config = ws.write(
        targets_section={"relative_to": "base", "levels": [0.99, 0.95], "main": 0.95},
        tuning_groups={k: list(v) for k, v in GROUPS.items()},
        tuning_max_climb=1.02,
    )
    out = tmp_path / "tune-report"
    build_report(config, ws.runs_dir, ws.root / "calibration", ws.root / "variance", out,
                 base_dir=ws.root / "base")  # fmt: skip
    record = json.loads((out / "tuning.json").read_text())
    assert record["groups"]["diloco"]["chosen_run"] == "diloco-b"
    assert record["main_target"]["level"] == 0.99

    # The default config (here: the same runs) names the record; its page shows the grid,
    # effective lrs, the chosen point and where its own settings differ.
    config = ws.write(
        targets_section={"relative_to": "base", "levels": [0.99, 0.95], "main": 0.95},
        tuning=str(out / "tuning.json"),
    )
    page_dir = tmp_path / "default-report"
    build_report(config, ws.runs_dir, ws.root / "calibration", ws.root / "variance", page_dir,
                 base_dir=ws.root / "base")  # fmt: skip
    page = (page_dir / "index.html").read_text()
    assert "<b>lr 0.0015, outer lr 0.5, outer momentum 0: 60 (climb 0.990×)</b>" in page
    assert "lr 0.005, outer lr 0.7, outer momentum 0.9 (Nesterov): 50 (climb 1.100×)" in page
    # No run of this config is named diloco: nothing configured to compare.
    assert "Suggested main target: 0.99 × the base" in page
    assert "report.targets.main is 0.95 <span class='verdict fails'>differs</span>" in page
    assert not (page_dir / "tuning.json").exists()


def test_tuning_table_flags_each_setting_that_differs(tmp_path):
    path = tmp_path / "tuning.json"
    chosen = {"inner_lr": 0.003, "outer_lr": 0.7, "outer_momentum": 0.9, "nesterov": True}
    point = {**chosen, "run": "diloco-x", "value": 60.0}
    record = {"max_climb": 1.02, "groups": {"diloco": {"points": [point], "chosen": chosen}}}
    path.write_text(json.dumps(record))
    same = tuning_table(load_tuning(path), {"diloco": dict(chosen)})
    assert same[0]["differs"] == [] and same[0]["max_climb"] == 1.02
    other = tuning_table(load_tuning(path), {"diloco": {**chosen, "outer_lr": 0.5,
                                                        "nesterov": False}})  # fmt: skip
    assert other[0]["differs"] == ["outer_lr", "nesterov"]
    assert tuning_table(load_tuning(path), {})[0]["configured"] is None


@pytest.mark.parametrize(
    "group, message",
    [
        ({"points": [], "chosen": {}}, "points must be a non-empty list"),
        ({"points": [{"inner_lr": 0.1, "value": 1.0}], "chosen": {}}, "a point lacks outer_lr"),
        (
            {
                "points": [
                    {
                        "inner_lr": 0.1,
                        "outer_lr": 1,
                        "outer_momentum": 0,
                        "nesterov": False,
                        "value": 1.0,
                    }
                ],
                "chosen": {"inner_lr": 0.1},
            },
            "chosen must give a number for each of inner_lr",
        ),  # fmt: skip
    ],
)
def test_a_malformed_record_is_refused_naming_the_group(tmp_path, group, message):
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps({"groups": {"diloco": group}}))
    with pytest.raises(ValueError, match=f"groups.diloco: {message}"):
        load_tuning(path)
