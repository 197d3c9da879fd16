"""Mechanism checks: batch growth, merges and switch mode, counted per seed from the rows."""

from __future__ import annotations

from adloco.report.analysis.mechanisms import mechanism_checks, switch_rounds

MERGE = {"type": "merge", "merged": [0, 1], "kept": 0, "batch": 8}


def by_mechanism(checks, run: str) -> dict:
    return {c.mechanism: c for c in checks if c.run == run}


def test_switch_rounds_counts_rounds_not_rows():
    rows = [
        {"round": 1, "switch_mode": "capped"},
        {"round": 1, "switch_mode": "capped"},  # a second trainer in the same round
        {"round": 2, "switch_mode": "accumulate"},
        {"round": 3, "switch_mode": "plain"},
        {"round": 4},
    ]
    assert switch_rounds(rows) == {"accumulate": 1, "capped": 1}


def test_each_mechanism_observed_on_the_seeds_that_show_it(workspace):
    ws = workspace
    # Seed 0: the batch grows 4 -> 16, the two trainers merge in round 2, round 3 is capped.
    # Seed 1: the batch stays at 8, no merge, no switch mode.
    grows = [
        [{"ppl": 90, "req": 4}, {"ppl": 95, "req": 4}],
        [{"ppl": 80, "req": 8, "events": [MERGE]}, {"ppl": 85, "req": 8}],
        [{"ppl": 70, "req": 16, "mode": "capped"}],
    ]
    flat = [[{"ppl": 90, "req": 8}, {"ppl": 95, "req": 8}]] * 3
    ws.run("adloco", ws.FULL_ADLOCO, {0: grows, 1: flat})
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([90, 80, 70]), 1: ws.single([90, 80, 70])})
    runs, *_ = ws.load([60])
    checks = mechanism_checks(runs)
    assert {c.run for c in checks} == {"adloco"}  # only adloco runs are checked
    mine = by_mechanism(checks, "adloco")
    batch = mine["batch grows"]
    assert (batch.status, batch.seeds_observed, batch.seeds) == ("observed", 1, 2)
    # Medians over the seeds of the first and last rounds' largest batch: (4+8)/2, (16+8)/2.
    assert batch.detail.startswith("largest requested global batch 6 in the first round, 12")
    merge = mine["trainers merge"]
    assert (merge.status, merge.seeds_observed, merge.detail) == (
        "observed",
        1,
        "merges per seed: 1, 0",
    )
    switch = mine["switch mode engages"]
    assert (switch.status, switch.seeds_observed) == ("observed", 1)
    assert switch.detail == "rounds capped / accumulating per seed: 1/0, 0/0"


def test_a_component_the_run_turns_off_is_off_not_missing(workspace):
    ws = workspace
    settings = {**ws.FULL_ADLOCO, "batch_test": "none", "merge": "none",
                "switch": "never_accumulate"}  # fmt: skip
    ws.run("adloco-off", settings, {0: ws.single([90, 80], req=8)})
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([90, 80])})
    runs, *_ = ws.load([60])
    mine = by_mechanism(mechanism_checks(runs), "adloco-off")
    assert {m: c.status for m, c in mine.items()} == {
        "batch grows": "off",
        "trainers merge": "off",
        "switch mode engages": "off",
    }
    assert mine["switch mode engages"].detail.endswith("(policy never_accumulate)")
    assert mine["batch grows"].as_dict()["seeds"] == 1


def test_nothing_observed_says_not_observed(workspace):
    ws = workspace
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 80], [95, 85])})
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([90, 80])})
    runs, *_ = ws.load([60])
    mine = by_mechanism(mechanism_checks(runs), "adloco")
    assert {m: (c.status, c.seeds_observed) for m, c in mine.items()} == {
        "batch grows": ("not observed", 0),
        "trainers merge": ("not observed", 0),
        "switch mode engages": ("not observed", 0),
    }
