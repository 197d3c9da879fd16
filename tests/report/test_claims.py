"""Claim verdicts on result trees built to support and to contradict each claim.

Runs are written by the ``workspace`` fixture (tests/report/conftest.py): one
row per trainer per round, communications counting one per row, simulated
time ``sim_s_per_round`` per round and 100 tokens per row. DiLoCo's final
perplexity is the target unless a test sets one.
"""

from __future__ import annotations

import pytest

from adloco.report.claims import NOT_SUPPORTED, NOT_TESTABLE, SUPPORTED, merge_count


@pytest.fixture
def ws(workspace):
    return workspace


def baseline(ws, seeds=(0,), ppls=(100, 80, 60), sim=1.0):
    # Target 60, reached in round 3: 3 communications, 3 * sim seconds.
    ws.run("diloco", {"method": "diloco"}, {s: ws.single(list(ppls)) for s in seeds}, sim)


# --- claims 1 and 2: communications and simulated time to target ---------------------------


def test_fewer_communications_supported(ws):
    baseline(ws)
    # Round 1: min(90, 55) = 55 <= 60 after 2 communications (< 3).
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 50], [55, 50])})
    claims = ws.claims()
    assert claims[1].verdict == SUPPORTED
    assert (claims[1].seeds_agree, claims[1].seeds) == (1, 1)
    assert "adloco: 2 communications; diloco: 3 communications" in " ".join(claims[1].details)


def test_more_communications_not_supported_but_less_time_supported(ws):
    baseline(ws, sim=1.0)
    # Reached in round 2 (min(70, 58) = 58): 4 communications > 3, but 2 s < 3 s.
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 70], [95, 58])}, sim_s_per_round=1.0)
    claims = ws.claims()
    assert claims[1].verdict == NOT_SUPPORTED
    assert claims[2].verdict == SUPPORTED
    assert "adloco: 2 s simulated; diloco: 3 s simulated" in " ".join(claims[2].details)


def test_more_simulated_time_not_supported(ws):
    baseline(ws, sim=1.0)
    # Reached in round 1 (2 communications < 3) but a round takes 4 s: 4 s > 3 s.
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([50], [55])}, sim_s_per_round=4.0)
    claims = ws.claims()
    assert claims[1].verdict == SUPPORTED
    assert claims[2].verdict == NOT_SUPPORTED


def test_equal_communications_is_not_fewer(ws):
    baseline(ws, ppls=(100, 80, 70, 60))  # 4 communications
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 70], [95, 58])})  # 4 communications
    assert ws.claims()[1].verdict == NOT_SUPPORTED


def test_adloco_never_reaching_target_is_not_supported(ws):
    baseline(ws)
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 70, 65], [95, 75, 61])})
    claim = ws.claims()[1]
    assert claim.verdict == NOT_SUPPORTED
    assert "adloco: never reached; diloco: 3 communications" in " ".join(claim.details)
    assert "adloco reached it in 0 of 1 seeds" in " ".join(claim.details)


def test_neither_reaching_configured_target_is_not_testable(ws):
    baseline(ws)
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 70], [95, 75])})
    claim = ws.claims(target=10.0)[1]
    assert claim.verdict == NOT_TESTABLE
    assert claim.verdict_text.startswith("not testable here (neither run reached")


def test_no_diloco_is_not_testable(ws):
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 50], [55, 50])})
    claims = ws.claims()
    for number in (1, 2):
        assert claims[number].verdict == NOT_TESTABLE
        assert "no run of method diloco" in claims[number].verdict_text


def test_several_seeds_compare_means_and_count_agreement(ws):
    # DiLoCo finals 60 and 70: target 65; seed 0 reaches it in round 3, seed 1 never.
    ws.run(
        "diloco", {"method": "diloco"}, {0: ws.single([100, 80, 60]), 1: ws.single([100, 80, 70])}
    )
    # AdLoCo seed 0 at 2 communications, seed 1 at 4: mean 3, finite; DiLoCo's mean is
    # "never" because seed 1 never reached it.
    ws.run(
        "adloco", ws.FULL_ADLOCO, {0: ws.pair([60, 50], [70, 50]), 1: ws.pair([90, 64], [95, 66])}
    )
    claim = ws.claims()[1]
    assert claim.verdict == SUPPORTED
    assert (claim.seeds_agree, claim.seeds) == (2, 2)
    assert "adloco: 3 communications; diloco: not reached in every seed (means over seeds)" in (
        " ".join(claim.details)
    )


def test_several_seeds_one_adloco_seed_missing_target(ws):
    baseline(ws, seeds=(0, 1))  # both seeds reach 60 at 3 communications
    ws.run(
        "adloco",
        ws.FULL_ADLOCO,
        {0: ws.pair([55, 50], [70, 50]), 1: ws.pair([90, 70, 65], [95, 75, 61])},
    )
    claim = ws.claims()[1]
    assert claim.verdict == NOT_SUPPORTED
    assert (claim.seeds_agree, claim.seeds) == (1, 2)
    assert "2 of 2 seeds agree" not in " ".join(claim.details)
    assert "1 of 2 seeds agree" in " ".join(claim.details)


# --- claim 3: ablations ----------------------------------------------------------------------


def with_ablation(ws, ablation_rounds):
    baseline(ws)
    # Full AdLoCo: reaches 60 in round 1 (2 communications), final 50.
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([58, 50], [70, 52])})
    ws.run("adloco-no-merge", {**ws.FULL_ADLOCO, "merge": "none"}, {0: ablation_rounds})


def test_ablation_worse_on_both_supported(ws):
    # Reaches 60 in round 2 (4 communications), final 55 > 50.
    with_ablation(ws, ws.pair([70, 59], [75, 55]))
    claim = ws.claims()[3]
    assert claim.verdict == SUPPORTED
    text = " ".join(claim.details)
    assert "adloco-no-merge (merge=none)" in text
    assert "final perplexity 55 vs 50 (worse" in text
    assert "communications to target 4 vs 2 (worse" in text


def test_ablation_better_final_perplexity_not_supported(ws):
    # Later to target (4 communications) but ends lower: 45 < 50.
    with_ablation(ws, ws.pair([70, 59], [75, 45]))
    claim = ws.claims()[3]
    assert claim.verdict == NOT_SUPPORTED
    assert "final perplexity 45 vs 50 (not worse" in " ".join(claim.details)


def test_ablation_sooner_to_target_not_supported(ws):
    # Same 2 communications to target as full AdLoCo (not more), final 55 > 50.
    with_ablation(ws, ws.pair([59, 55], [70, 56]))
    claim = ws.claims()[3]
    assert claim.verdict == NOT_SUPPORTED
    assert "communications to target 2 vs 2 (not worse" in " ".join(claim.details)


def test_no_ablation_not_testable(ws):
    baseline(ws)
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([58, 50], [70, 52])})
    assert ws.claims()[3].verdict_text == "not testable here (no ablation runs are configured)"


# --- claim 4: batch growth -------------------------------------------------------------------


def test_batch_growth_supported(ws):
    rounds = [[{"ppl": 90, "req": 4}, {"ppl": 95, "req": 4}], [{"ppl": 80, "req": 16}]]
    ws.run("adloco", ws.FULL_ADLOCO, {0: rounds})
    claim = ws.claims()[4]
    assert claim.verdict == SUPPORTED
    assert "4 in the first round, 16 in the last" in claim.details[0]


def test_constant_batch_not_supported(ws):
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 80], [95, 85])})  # req 4 throughout
    claim = ws.claims()[4]
    assert claim.verdict == NOT_SUPPORTED
    assert "grew in 0 of 1 seeds" in claim.details[0]


# --- claim 5: merges -------------------------------------------------------------------------


MERGE = {"type": "merge", "merged": [0, 1], "kept": 0}


def test_merges_supported(ws):
    rounds = [[{"ppl": 90}, {"ppl": 95}], [{"ppl": 80, "events": [MERGE]}]]
    ws.run("adloco", ws.FULL_ADLOCO, {0: rounds})
    claim = ws.claims()[5]
    assert claim.verdict == SUPPORTED
    assert "1 merge event" in claim.details[0]


def test_no_merge_events_not_supported(ws):
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 80], [95, 85])})
    claim = ws.claims()[5]
    assert claim.verdict == NOT_SUPPORTED
    assert "0 merge events" in claim.details[0]


def test_merging_off_not_testable(ws):
    ws.run("adloco-only", {**ws.FULL_ADLOCO, "merge": "none"}, {0: ws.pair([90], [95])})
    assert ws.claims()[5].verdict_text == "not testable here (merging is off in run adloco-only)"


def test_merge_count_dedupes_one_event_logged_twice():
    other = {"type": "merge", "merged": [2, 3], "kept": 2}
    rows = [
        {"round": 3, "events": [MERGE]},
        {"round": 3, "events": [dict(MERGE)]},  # the same merge on the absorbed trainer's row
        {"round": 3, "events": [other, {"type": "batch_change", "from": 4, "to": 8}]},
        {"round": 6, "events": [MERGE]},
    ]
    assert merge_count(rows) == 3


# --- claim 6: switch mode --------------------------------------------------------------------


def test_switch_engaged_supported(ws):
    rounds = [
        [{"ppl": 90, "req": 8}, {"ppl": 95, "req": 8}],
        [{"ppl": 80, "req": 32, "eff": 32, "mode": "accumulate"}, {"ppl": 85, "req": 8}],
    ]
    ws.run("adloco", ws.FULL_ADLOCO, {0: rounds})
    claim = ws.claims()[6]
    assert claim.verdict == SUPPORTED
    assert "1 round with accumulation, 0 rounds capped" in claim.details[0]


def test_switch_never_engaged_not_supported(ws):
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.pair([90, 80], [95, 85])})
    claim = ws.claims()[6]
    assert claim.verdict == NOT_SUPPORTED
    assert "largest requested global batch was 4" in claim.details[1]


def test_switch_policy_off_not_testable(ws):
    settings = {**ws.FULL_ADLOCO, "switch": "never_accumulate"}
    ws.run("adloco", settings, {0: ws.pair([90], [95])})
    assert "uses the never_accumulate policy" in ws.claims()[6].verdict_text


def test_no_adloco_run_makes_every_claim_not_testable(ws):
    baseline(ws)
    claims = ws.claims()
    assert all(c.verdict == NOT_TESTABLE for c in claims.values())
    assert all("no run of method adloco" in c.verdict_text for c in claims.values())
