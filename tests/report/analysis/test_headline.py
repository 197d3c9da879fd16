"""The headline table: each seed of AdLoCo, DiLoCo and the best baseline, side by side."""

from __future__ import annotations

import dataclasses
import math

import pytest

from adloco.report.analysis.claims import Context
from adloco.report.analysis.headline import headline_table


def test_each_seed_to_the_main_target_and_at_the_equal_time(workspace):
    ws = workspace
    # diloco reaches 60 at round 3 (3 s, 3 communications); adloco at round 2 of one trainer
    # (2 s, 2 communications) on seed 0 and never on seed 1.
    ws.run("diloco", {"method": "diloco"},
           {0: ws.single([100, 80, 60]), 1: ws.single([100, 80, 60])})  # fmt: skip
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.single([90, 55]), 1: ws.single([90, 70])})
    runs, roles, ladder, settings = ws.load([60])
    head = headline_table(Context(runs, roles, ladder, settings, ""))
    assert head.runs == ["adloco", "diloco"] and head.seeds == [0, 1]
    assert head.time_s == 2.0  # fastest: adloco's seeds finish at 2 s
    # At a model that exists (report.between's default): adloco seed 0's outer step of
    # round 2 is the first below 60; diloco meets 60 exactly at round 3.
    assert head.values["sim_time_s"]["adloco"] == {0: 2.0, 1: math.inf}
    assert head.values["sim_time_s"]["diloco"] == {0: 3.0, 1: 3.0}
    assert head.values["communications"]["adloco"][0] == 2.0
    assert head.values["perplexity_at_time"]["diloco"] == {0: 80, 1: 80}
    doc = head.as_dict()
    assert doc["equal_time_s"] == 2.0
    never = doc["values"]["sim_time_s"]["adloco"]
    assert never == {"0": 2.0, "1": None}  # never: None
    # Interpolated: adloco seed 0 crosses 60 between 90 at round 1 and 55 at round 2.
    runs, roles, ladder, settings = ws.load([60], between="interpolated")
    head = headline_table(Context(runs, roles, ladder, settings, ""))
    f = math.log(90 / 60) / math.log(90 / 55)
    assert head.values["sim_time_s"]["adloco"] == {0: pytest.approx(1 + f), 1: math.inf}
    assert head.values["communications"]["adloco"][0] == pytest.approx(1 + f)
    whole = headline_table(Context(runs, roles, ladder, ws.load([60], between="round")[3], ""))
    assert whole.values["sim_time_s"]["adloco"] == {0: 2.0, 1: math.inf}
    no_target = dataclasses.replace(ladder, main=None)
    assert headline_table(Context(runs, roles, no_target, settings, "")) is None
