"""The tuning record: written by the tuning experiment's report, shown by the default's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from results_folder import report_request

from adloco.config import ConfigError, load_config
from adloco.report import build_report
from adloco.report.analysis.tuning import (
    beyond,
    choose,
    edges,
    tuning_record,
    tuning_table,
)
from adloco.report.inputs.results import load_runs
from adloco.report.inputs.tuning_record import load_tuning
from adloco.report.page.evidence import _sensitivity

BASE = 100.0
TUNING_JSON = Path(__file__).resolve().parents[3] / "config" / "tuning.json"
# The record the grid before this one gave, chosen by final perplexity (no edges in it).
OLD_RECORD = Path(__file__).resolve().parents[2] / "fixtures" / "tuning-by-final-perplexity.json"


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
    diloco = record_of(workspace, tuning_max_climb=1.02, tuning_metric="final_perplexity")
    diloco = diloco["groups"]["diloco"]
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
    final = record_of(workspace, tuning_metric="final_perplexity")["groups"]["diloco"]
    assert final["chosen_run"] == "diloco-d"
    # By time to the main target (0.99 x 100 = 99, below): a, b and c are at 99 at their
    # first evaluation (1 s); d at its second round's outer step (95 at 2 s; interpolated
    # it would be 1 + ln(110/99)/ln(110/95) s). a, b and c tie in time on three seeds
    # each: the smaller steps (a's inner lr) break it, not final perplexity.
    timed = record_of(workspace)["groups"]["diloco"]
    times = {p["run"]: p["time_to_main_s"] for p in timed["points"]}
    assert times["diloco-b"] == times["diloco-a"] == 1.0
    assert times["diloco-d"] == 2.0
    interpolated = record_of(workspace, between="interpolated")["groups"]["diloco"]
    times = {p["run"]: p["time_to_main_s"] for p in interpolated["points"]}
    assert times["diloco-d"] == pytest.approx(1 + math.log(110 / 99) / math.log(110 / 95))
    assert timed["chosen_run"] == "diloco-a" and timed["by_final_perplexity"] == "diloco-d"
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


def race(ws):
    """diloco at five points (base 100, 8 rounds of 100 tokens), seeds 0-2, and one adloco.

    Per seed curves (N: 99, 98, 97, 97, 96, 96, 96, 96, never at or below 95):
    slow   (i0.003,  o1.0): 99 97 96 95 94 93 92 80, 1 s a round: final 80, climb 0.99
    fast   (i0.0015, o1.0): 95 94 93 92 91 90 89 85 (seed 2: N), 2 s a round: final 85
    never  (i0.006,  o1.0): N: final 96;  never2 (i0.006, o0.5): 99 98 97 ... 97: final 97
    climb  (i0.012,  o1.0): 110 90 89 88 87 86 85 70: final 70, climb 1.10
    adloco-a (i0.003, o0.7): 99 94 93 92 91 90.5 90.2 89.
    """
    n = [99, 98, 97, 97, 96, 96, 96, 96]
    curves = {
        ("diloco-slow", 0.003, 1.0, 1.0): [[99, 97, 96, 95, 94, 93, 92, 80]] * 3,
        ("diloco-fast", 0.0015, 1.0, 2.0): [[95, 94, 93, 92, 91, 90, 89, 85]] * 2 + [n],
        ("diloco-never", 0.006, 1.0, 1.0): [n] * 3,
        ("diloco-never2", 0.006, 0.5, 1.0): [[99, 98] + [97] * 6] * 3,
        ("diloco-climb", 0.012, 1.0, 1.0): [[110, 90, 89, 88, 87, 86, 85, 70]] * 3,
    }
    for (name, inner, outer, seconds), per_seed in curves.items():
        settings = {"method": "diloco", "inner_lr": inner, "outer_lr": outer}
        ws.run(name, settings, {s: curve(c) for s, c in enumerate(per_seed)}, seconds)
    ws.run("adloco-a", {**ws.FULL_ADLOCO, "inner_lr": 0.003, "outer_lr": 0.7},
           {s: curve([99, 94, 93, 92, 91, 90.5, 90.2, 89]) for s in range(3)})  # fmt: skip
    ws.base(BASE)


RACE = {
    "diloco": ("diloco-slow", "diloco-fast", "diloco-never", "diloco-never2", "diloco-climb"),
    "adloco": ("adloco-a",),
}


def race_record(ws, **report):
    config = load_config(
        ws.write(
            targets_section={"relative_to": "base", "levels": [0.99, 0.95, 0.9], "main": 0.9},
            tuning_groups={k: list(v) for k, v in RACE.items()},
            **report,
        )
    )
    return tuning_record(config, load_runs(ws.runs_dir, config), RACE, BASE)


def test_the_choice_by_time_to_the_main_target_differs_from_final_perplexitys(workspace):
    race(workspace)
    record = race_record(workspace, tuning_max_climb=1.02)
    # The target first, from the points final perplexity chooses (slow: 80 is the lowest
    # final within the climb limit; adloco-a): both reach 0.99 and 0.95 within 6 of 8
    # rounds, 0.9 only at round 8. Not report.targets.main (0.9): the suggested level.
    assert record["main_target"]["runs"] == ["adloco-a", "diloco-slow"]
    assert record["main_target"]["level"] == 0.95
    assert record["target"]["perplexity"] == pytest.approx(95.0)
    assert record["target"]["from"] == "main_target"
    diloco = record["groups"]["diloco"]
    points = {p["run"]: p for p in diloco["points"]}
    # slow is at 95 at round 4 (1 s a round); fast at its first evaluation, round 1 at
    # 2 s a round, on seeds 0 and 1: median of 2, 2 and never is 2; never and never2
    # never get there; climb's outer step of round 2 is the first below 95 (90, at 2 s).
    assert points["diloco-slow"]["time_to_main_s"] == 4.0
    assert points["diloco-fast"]["time_to_main_s"] == 2.0
    assert points["diloco-fast"]["reached_main"] == 2 and points["diloco-fast"]["value"] == 85
    assert points["diloco-never"]["time_to_main_s"] is None
    assert points["diloco-never"]["reached_main"] == 0
    assert points["diloco-climb"]["time_to_main_s"] == 2.0
    # climb is the fastest but climbs 1.10 > 1.02: fast is chosen; final perplexity
    # would choose slow (80 < 85), named beside it.
    assert diloco["chosen_run"] == "diloco-fast" and diloco["within_max_climb"]
    assert diloco["by_final_perplexity"] == "diloco-slow"
    assert record["metric"] == "time_to_main"
    # The target does not move with the criterion it drives.
    final = race_record(workspace, tuning_max_climb=1.02, tuning_metric="final_perplexity")
    assert final["groups"]["diloco"]["chosen_run"] == "diloco-slow"
    assert final["main_target"] == record["main_target"] and final["target"] == record["target"]
    # Without a limit, climb ties fast in time (both at 2 s: climb's round-2 outer step,
    # fast's round 1 of 2 s) and is the lowest final (70); fast's smaller inner lr wins
    # the tie (final perplexity breaks no tie in time), and climb is named beside it.
    free = race_record(workspace)["groups"]["diloco"]
    assert free["chosen_run"] == "diloco-fast" and free["by_final_perplexity"] == "diloco-climb"


def test_a_censored_point_ranks_after_every_point_that_reaches_then_by_final():
    steps = {"inner_lr": 0.001, "outer_lr": 1.0, "outer_momentum": 0.0, "nesterov": False}
    never = {**steps, "run": "never", "value": 50.0, "climb": 1.0, "time_to_main_s": None}
    never2 = {**steps, "run": "never2", "value": 55.0, "climb": 1.0, "time_to_main_s": None}
    slow = {**steps, "run": "slow", "value": 90.0, "climb": 1.0, "time_to_main_s": 9.0}
    assert choose([never, never2, slow], None, "time_to_main") == (slow, True)
    assert choose([never2, never], None, "time_to_main") == (never, True)
    assert choose([never, never2, slow], None, "final_perplexity") == (never, True)
    # A tie in time goes to more seeds, then to the smaller lr: never to final perplexity.
    fast = {**slow, "run": "fast", "time_to_main_s": 9.0, "value": 80.0}
    assert choose([slow, fast], None, "time_to_main")[0]["run"] == "slow"
    small = {**fast, "run": "small", "inner_lr": 0.0005}
    assert choose([fast, small], None, "time_to_main")[0]["run"] == "small"
    with pytest.raises(ConfigError, match="tuning_metric"):
        choose([slow], None, "best")


def test_without_a_target_every_point_is_censored_and_final_perplexity_decides(workspace):
    race(workspace)
    config = load_config(
        workspace.write(
            targets_section={"relative_to": "base", "levels": [0.5]},
            tuning_groups={k: list(v) for k, v in RACE.items()},
        )
    )
    record = tuning_record(config, load_runs(workspace.runs_dir, config), RACE, BASE)
    # No level 0.5 (50) is reached: no suggested main, no report.targets.main.
    assert record["main_target"]["level"] is None and record["target"]["perplexity"] is None
    diloco = record["groups"]["diloco"]
    assert all(p["time_to_main_s"] is None for p in diloco["points"])
    assert diloco["chosen_run"] == diloco["by_final_perplexity"] == "diloco-climb"


def test_the_next_value_beyond_an_edge():
    assert beyond("inner_lr", 0.003, -1) == 0.0015
    assert beyond("outer_lr", 0.7, 1) == 1.4
    assert beyond("outer_momentum", 0.9, 1) == 0.95
    assert beyond("outer_momentum", 0.6, 1) == 0.75
    assert beyond("outer_momentum", 0.5, -1) == 0.0
    assert beyond("outer_momentum", 0.95, 1) is None  # the range's own end
    assert beyond("outer_momentum", 0.0, -1) is None


def test_a_chosen_point_at_an_edge_proposes_the_value_beyond_it(workspace):
    race(workspace)
    record = race_record(workspace, tuning_max_climb=1.02)
    # fast (inner 0.0015, outer 1.0, momentum 0) is chosen: the smallest inner lr of
    # 0.0015-0.012, and momentum 0, the only one searched: 0 is the range's end below, 0.5
    # the next step above. Outer lr 0.5 was tried at inner 0.006 only, off the line through
    # the chosen point: at inner 0.0015 the outer lr 1.0 is the only one searched.
    assert record["groups"]["diloco"]["edges"] == {
        "inner_lr": {"searched": [0.0015, 0.003, 0.006, 0.012], "chosen": 0.0015,
                     "edge": "low", "next": [0.00075]},
        "outer_lr": {"searched": [1.0], "chosen": 1.0, "edge": "low and high",
                     "next": [0.5, 2.0]},
        "outer_momentum": {"searched": [0.0], "chosen": 0.0, "edge": "high", "next": [0.5]},
    }  # fmt: skip
    # adloco's one point is at both edges of each lr.
    adloco = record["groups"]["adloco"]["edges"]
    assert adloco["inner_lr"]["edge"] == "low and high"
    assert adloco["inner_lr"]["next"] == [0.0015, 0.006]
    assert adloco["outer_lr"]["next"] == [0.35, 1.4]
    assert record["bracketed"] is False
    # Inside its grid in every dimension: no edge, nothing proposed. ddp and localsgd
    # have no outer dimension to bracket (their method fixes the outer step).
    steps = {"outer_lr": 1.0, "outer_momentum": 0.0, "nesterov": False}
    points = [{**steps, "inner_lr": lr} for lr in (0.001, 0.002, 0.004)]
    inside = edges(points, points[1], "ddp")
    assert inside == {"inner_lr": {"searched": [0.001, 0.002, 0.004], "chosen": 0.002,
                                   "edge": None, "next": []}}  # fmt: skip
    at_top = edges(points, points[2], "localsgd")
    assert list(at_top) == ["inner_lr"] and at_top["inner_lr"]["next"] == [0.008]
    # On lines through a point (tune-grid.py --lines), each dimension is read along its own
    # line: the chosen corner of two lines is inside both.
    center = {**steps, "inner_lr": 0.002, "outer_lr": 0.7}
    cross = [center, *({**center, "inner_lr": v} for v in (0.001, 0.004)),
             *({**center, "outer_lr": v} for v in (0.35, 1.4))]  # fmt: skip
    assert {k: e["edge"] for k, e in edges(cross, center, "diloco").items()} == {
        "inner_lr": None, "outer_lr": None, "outer_momentum": "high"}  # fmt: skip
    # Its neighbour on the inner-lr line is at that line's edge, and alone on its outer line.
    low = edges(cross, cross[1], "diloco")
    assert low["inner_lr"]["edge"] == "low" and low["outer_lr"]["edge"] == "low and high"
    # One trainer merges nothing: the trainers line from a one-trainer point takes the merged
    # points of any merge rule's default, and a two-trainer point's line reaches one trainer.
    mech = {**center, "eta": 0.4, "merge_batch": "per_node"}
    trainers = [{**mech, "initial_trainers": t} for t in (1, 2)]
    trainers.append({**mech, "initial_trainers": 2, "merge_batch": "max"})
    assert edges(trainers, trainers[0], "adloco")["initial_trainers"]["searched"] == [1.0, 2.0]
    line = edges(trainers, trainers[2], "adloco")["initial_trainers"]
    assert line["searched"] == [1.0, 2.0] and line["edge"] == "high"


def test_unknown_runs_and_a_limit_without_base_are_refused(workspace):
    grid(workspace)
    config = load_config(workspace.write([60], tuning_groups={"adloco": ["adloco-a"]},
                                         tuning_max_climb=1.02))  # fmt: skip
    runs = load_runs(workspace.runs_dir, config)
    with pytest.raises(ConfigError, match="report.tuning_groups.adloco: no run named nope"):
        tuning_record(config, runs, {"adloco": ("nope",)}, BASE)
    with pytest.raises(ConfigError, match="tuning_max_climb needs the base"):
        tuning_record(config, runs, {"adloco": ("adloco-a",)}, None)


@pytest.mark.heavy
def test_build_report_writes_tuning_json_and_the_default_shows_it(workspace, tmp_path):
    grid(workspace)
    ws = workspace
    config = ws.write(
        targets_section={"relative_to": "base", "levels": [0.99, 0.95], "main": 0.95},
        tuning_groups={k: list(v) for k, v in GROUPS.items()},
        tuning_max_climb=1.02,
    )
    out = tmp_path / "tune-report"
    build_report(report_request(ws.root, out, config=config, base=ws.root / "base"))
    record = json.loads((out / "tuning.json").read_text())
    # a, b and c reach the target at their first evaluation on 3 seeds each: the smaller
    # inner lr (a) breaks the tie.
    assert record["groups"]["diloco"]["chosen_run"] == "diloco-a"
    assert record["main_target"]["level"] == 0.99

    # The default config (here: the same runs) names the record; its page shows the grid,
    # effective lrs, the chosen point and where its own settings differ.
    config = ws.write(
        targets_section={"relative_to": "base", "levels": [0.99, 0.95], "main": 0.95},
        tuning=str(out / "tuning.json"),
    )
    page_dir = tmp_path / "default-report"
    build_report(report_request(ws.root, page_dir, config=config, base=ws.root / "base"))
    page = (page_dir / "index.html").read_text()
    assert (
        "<b>lr 0.0005, outer lr 0.5, outer momentum 0: 70 (climb 0.990×), 1 s to the main "
        "target</b>" in page
    )
    assert (
        "lr 0.005, outer lr 0.7, outer momentum 0.9 (Nesterov): 50 (climb 1.100×), 2 s to "
        "the main target" in page
    )
    # The criterion, the sensitivity column and the edges of the grid.
    assert "The chosen point (bold) has the lowest median simulated time to the main target" in page
    assert "<th>final perplexity would choose</th><th>edges of the grid</th>" in page
    # Each dimension read along the line through the chosen point (inner 0.001, outer 0.5):
    # outer 0.7 and 1.0 were tried at other inner lrs only, inner 0.01 at another outer lr.
    assert (
        "outer lr 0.5 at the low and high edge of (0.5) <span class='verdict fails'>not "
        "bracketed</span>: next 0.25, 1" in page
    )
    assert (
        "inner lr 0.001 at the low edge of (0.001, 0.003) <span class='verdict fails'>"
        "not bracketed</span>: next 0.0005" in page
    )
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


def test_the_table_names_the_point_final_perplexity_would_choose(workspace):
    race(workspace)
    record = race_record(workspace, tuning_max_climb=1.02)
    entry = {e["run"]: e for e in tuning_table(record, {})}["diloco"]
    assert entry["metric"] == "time_to_main" and entry["by_final_perplexity"] == "diloco-slow"
    chosen = next(p for p in entry["points"] if p["run"] == "diloco-fast")
    # slow: effective lr 0.003 (lr scale 1), outer lr 1, final 80; the chosen fast's 85.
    words = "lr 0.003, outer lr 1: 80 (the chosen point's: 85)"
    assert _sensitivity(entry, chosen) == words


def test_a_record_without_edges_gets_them_from_its_grid():
    # The previous record was chosen by final perplexity on grids that did not bracket:
    # adloco's inner lr 0.003 at the low edge of 0.003-0.012, diloco's outer lr 1 at the
    # high edge of 0.5-1 (the record's own points and choices).
    rows = {e["run"]: e for e in tuning_table(load_tuning(OLD_RECORD), {})}
    assert rows["adloco"]["metric"] == "final_perplexity"
    assert rows["adloco"]["edges"]["inner_lr"] == {
        "searched": [0.003, 0.006, 0.012], "chosen": 0.003, "edge": "low", "next": [0.0015]
    }  # fmt: skip
    assert rows["diloco"]["edges"]["outer_lr"]["edge"] == "high"
    assert rows["diloco"]["edges"]["outer_lr"]["next"] == [2.0]
    assert list(rows["ddp"]["edges"]) == ["inner_lr"]  # no outer step to bracket


def test_the_committed_record_is_chosen_by_time():
    # Whether its grids bracket the choice: tests/test_tune_grid.py (a strict xfail until
    # the widening round is run).
    record = load_tuning(TUNING_JSON)
    rows = {e["run"]: e for e in tuning_table(record, {})}
    assert {e["metric"] for e in rows.values()} == {"time_to_main"}
    for name in rows:
        # The chosen point is the fastest to the main target among those within the climb.
        within = [p for p in record["groups"][name]["points"] if p["climb"] <= 1.02]
        fastest = min(p["time_to_main_s"] for p in within if p["time_to_main_s"] is not None)
        chosen = record["groups"][name]["chosen_run"]
        assert next(p for p in within if p["run"] == chosen)["time_to_main_s"] == fastest


def test_a_tie_in_time_goes_to_the_point_measured_on_more_seeds():
    from adloco.report.analysis.tuning import choose

    steps = {"inner_lr": 0.001, "outer_lr": 1.0, "outer_momentum": 0.0, "nesterov": False}
    # Equal median times: the point confirmed on 3 seeds beats the one on 1, though the
    # latter has the lower final perplexity and the smaller lr.
    one = {**steps, "run": "one", "value": 50.0, "climb": 1.0, "time_to_main_s": 2.0, "seeds": 1}
    three = {**steps, "inner_lr": 0.002, "run": "three", "value": 60.0, "climb": 1.0,
             "time_to_main_s": 2.0, "seeds": 3}  # fmt: skip
    assert choose([one, three], None, "time_to_main") == (three, True)
    # A faster point wins whatever its seeds.
    fast = {**one, "run": "fast", "time_to_main_s": 1.9}
    assert choose([one, three, fast], None, "time_to_main")[0] is fast
    # Points that never reach the target rank after, by final perplexity.
    never = {**one, "run": "never", "time_to_main_s": None, "value": 10.0}
    assert choose([never, three], None, "time_to_main")[0] is three
