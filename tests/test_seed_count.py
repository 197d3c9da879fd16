"""The default's seed count against its rule (scripts/seed-count.py, config/seed-count.json).

The record is the pilot's: each comparison a claim rests on, its per-seed
spread and the seeds it needs. Here the seeds needed are recomputed from the
recorded spread with the report's own power function, and the default must
train at least the most any comparison needs; the record's reading of a
claims.json is checked on a hand-made one.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import yaml

from adloco.report.analysis.power import seeds_for_power, superiority_power

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("seed_count", ROOT / "scripts" / "seed-count.py")
seed_count = importlib.util.module_from_spec(spec)
spec.loader.exec_module(seed_count)


def committed() -> dict:
    return json.loads((ROOT / seed_count.RECORD).read_text())


def test_the_default_trains_at_least_the_seeds_the_pilot_says_each_comparison_needs():
    kept = committed()
    default = yaml.safe_load((ROOT / seed_count.DEFAULT).read_text())
    assert kept["seeds_needed"] is not None
    assert len(default["seeds"]) >= kept["seeds_needed"]
    assert kept["seeds_needed"] == max(r["seeds_needed"] for r in kept["comparisons"])
    # The pilot's seeds are none of the claims'.
    pilot = yaml.safe_load((ROOT / seed_count.PRESET).read_text())
    assert not set(pilot["seeds"]) & set(default["seeds"])
    # Its rule is the default's report settings.
    report = default["report"]
    assert kept["rule"] == {
        "smallest_effect": report["smallest_effect"],
        "level": report["test_level"],
        "goal": report["power_goal"],
    }


@pytest.mark.parametrize(
    "row", committed()["comparisons"], ids=lambda r: f"{r['claim']}-{r['against']}-{r['quantity']}"
)
def test_each_recorded_need_is_the_power_functions_answer_at_its_spread(row):
    rule = committed()["rule"]
    margin = math.log1p(rule["smallest_effect"])
    need = seeds_for_power(
        row["sd_log_ratio"], margin, rule["level"], row["statistic"], rule["goal"]
    )
    assert need == row["seeds_needed"]
    # The smallest such number: one seed fewer falls short of the goal.
    power = superiority_power(
        row["sd_log_ratio"], need - 1, margin, rule["level"], row["statistic"]
    )
    assert power < rule["goal"]


def comparison(against, rests_on, sd=None, needed=None, verdict="not supported"):
    power = None
    if sd is not None:
        power = {"statistic": "signed_rank", "pairs": 5, "sd_log_ratio": sd,
                 "seeds_needed": needed, "smallest_effect": 0.1, "level": 0.05,
                 "goal": 0.8}  # fmt: skip
    return {"against": against, "quantity": "sim_time_s", "verdict": verdict,
            "claim_rests_on": rests_on, "power": power}  # fmt: skip


def test_the_record_keeps_only_what_a_claim_rests_on():
    claims = {
        "claims": [
            {"number": 1, "comparisons": [
                comparison("diloco", True, 0.1, 9),
                comparison("ddp anchor", False, 0.3, 30),  # not rested on: left out
                comparison("localsgd", True, 0.05, 5),
            ]},
            {"number": 3, "comparisons": [
                comparison("adloco-no-merge", True),  # no spread (a censored ablation)
                comparison("adloco-at-other-target", True, verdict="not testable"),
            ]},
        ]
    }  # fmt: skip
    kept = seed_count.record(claims, "pilot/claims.json")
    assert [r["against"] for r in kept["comparisons"]] == ["diloco", "localsgd"]
    assert kept["seeds_needed"] == 9
    assert kept["unsized"] == [
        {"claim": 3, "against": "adloco-no-merge", "quantity": "sim_time_s",
         "verdict": "not supported"}
    ]  # fmt: skip
    assert kept["rule"] == {"smallest_effect": 0.1, "level": 0.05, "goal": 0.8}
    # A comparison past the search's end makes the count unknown, not the largest found.
    claims["claims"][0]["comparisons"][2] = comparison("localsgd", True, 0.5, None)
    assert seed_count.record(claims, "x")["seeds_needed"] is None


def test_the_pilot_preset_is_the_default_on_held_out_seeds(tmp_path):
    text = seed_count.preset_text()
    pilot = yaml.safe_load(text)
    default = yaml.safe_load((ROOT / seed_count.DEFAULT).read_text())
    assert pilot["experiment"] == "pilot" and pilot["seeds"] == seed_count.PILOT_SEEDS
    assert {k: v for k, v in pilot.items() if k not in ("experiment", "seeds")} == {
        k: v for k, v in default.items() if k not in ("experiment", "seeds")
    }
    # A default without a top-level seeds line cannot be turned into the pilot.
    (tmp_path / "config").mkdir()
    (tmp_path / seed_count.DEFAULT).write_text("experiment: x\n")
    with pytest.raises(ValueError, match="no top-level seeds line"):
        seed_count.preset_text(tmp_path)
