"""Claim 1 answered twice: for the tuned AdLoCo and for the paper's configuration."""

from __future__ import annotations

import pytest

from adloco.config import ConfigError
from adloco.report.analysis.claims import PAPER
from adloco.report.analysis.verdict import NO_DIFFERENCE, NOT_SUPPORTED, SUPPORTED
from adloco.report.analysis.words import short_reason

EIGHT = tuple(range(8))


def runs(ws, step_reaches_at: int | None = None):
    """diloco reaches 60 at round 3 (3 s); the tuned adloco (one trainer, eta 0.4) at round 2
    (2 s); the paper's configuration (two trainers, eta 0.8) at round 4 (4 s), on eight seeds.
    With ``step_reaches_at``, the step between them (two trainers, eta 0.4) reaches 60 at
    that round."""
    ws.run("diloco", {"method": "diloco"}, {s: ws.single([90, 70, 60]) for s in EIGHT})
    tuned = {**ws.FULL_ADLOCO, "initial_trainers": 1, "eta": 0.4}
    ws.run("adloco", tuned, {s: ws.single([80, 59]) for s in EIGHT})
    ws.run("adloco-paper", {**ws.FULL_ADLOCO, "eta": 0.8},
           {s: ws.pair([95, 80, 70, 59], [96, 81, 71, 62]) for s in EIGHT})  # fmt: skip
    if step_reaches_at is not None:
        curve = [90, 80, 70, 65][: step_reaches_at - 1] + [59]
        ws.run("adloco-2-trainers", {**tuned, "initial_trainers": 2},
               {s: ws.pair(curve, [c + 1 for c in curve]) for s in EIGHT})  # fmt: skip


def test_claim_1_for_the_paper_configuration_names_what_decides_it(workspace):
    runs(workspace)
    claim = workspace.claims([60], paper_adloco="adloco-paper")[1]
    assert claim.verdict == SUPPORTED  # the tuned run: 2 s against 3 s on every seed
    paper = next(c for c in claim.comparisons if c.against == PAPER)
    assert paper.subject == "adloco-paper" and paper.baseline == "diloco"
    assert paper.subject_values == dict.fromkeys(EIGHT, 4.0)
    assert paper.verdict == NOT_SUPPORTED  # 4 s against 3 s on every seed
    assert "In the paper's configuration (adloco-paper): not supported" in claim.reason
    assert "differs from it in eta 0.4 against 0.8, initial_trainers 1 against 2." in claim.reason
    assert not paper.headline  # the claim's verdict is the tuned run's
    # Without a run between them, the two settings decide it together.
    assert claim.decides == (
        "Towards the paper's configuration: tuned adloco: supported; then eta 0.8, "
        "initial_trainers 2 (adloco-paper): not supported; so eta 0.8, initial_trainers 2 "
        "decides it."
    )


@pytest.mark.parametrize(
    ("reaches_at", "decides"),
    [
        (4, "initial_trainers 2 decides it"),  # the step is as slow as the paper's run
        (2, "eta 0.8 decides it"),  # the step is as fast as the tuned run
    ],
)
def test_a_run_between_them_names_the_one_setting_that_decides(workspace, reaches_at, decides):
    runs(workspace, step_reaches_at=reaches_at)
    claim = workspace.claims([60], paper_adloco="adloco-paper")[1]
    step = next(c for c in claim.comparisons if c.against == "diloco, adloco-2-trainers")
    assert step.subject_values == dict.fromkeys(EIGHT, float(reaches_at))
    assert step.beside and not step.headline
    verdict = NOT_SUPPORTED if reaches_at > 3 else SUPPORTED
    assert claim.decides == (
        "Towards the paper's configuration: tuned adloco: supported; then initial_trainers 2 "
        f"(adloco-2-trainers): {verdict}; then eta 0.8 (adloco-paper): not supported; so "
        f"{decides}."
    )
    # Claim 3 shows multi-instance training beside its ablations: the step (the tuned run
    # with the paper's trainers) as the full run against the tuned run without them.
    tuned = {**workspace.FULL_ADLOCO, "initial_trainers": 1, "eta": 0.4}
    workspace.run("adloco-no-adaptive", {**tuned, "batch_test": "none"},
                  {s: workspace.single([80, 70, 59]) for s in EIGHT})  # fmt: skip
    third = workspace.claims([60], paper_adloco="adloco-paper")[3]
    assert third.verdict == SUPPORTED  # its ablation: 3 s against the tuned run's 2 s
    multi = next(c for c in third.comparisons if c.subject == "adloco-2-trainers")
    assert multi.against == "adloco" and multi.beside and not multi.headline
    assert multi.subject_values == dict.fromkeys(EIGHT, float(reaches_at))
    assert multi.against_values == dict.fromkeys(EIGHT, 2.0)
    assert multi.verdict == (NOT_SUPPORTED if reaches_at > 2 else NO_DIFFERENCE)
    assert "Multi-instance training, which the tuned run turns off, beside them" in third.reason
    assert f"adloco-2-trainers needs {reaches_at / 2:.3g}× adloco's simulated time" in (
        short_reason(third)
    )
    # The first screen's sentence: the headline, the steps beside it, what decides it.
    reason = short_reason(claim)
    assert reason.startswith("AdLoCo needs 0.667× diloco's simulated time to 60")
    assert f"adloco-2-trainers needs {reaches_at / 3:.3g}× diloco's simulated time" in reason
    assert reason.endswith(claim.decides)


def test_without_the_role_claim_1_is_answered_once(workspace):
    runs(workspace)
    claim = workspace.claims([60])[1]
    assert all(c.against != PAPER for c in claim.comparisons)
    assert "paper's configuration" not in claim.reason


def test_the_role_must_name_another_adloco_run(workspace):
    runs(workspace)
    with pytest.raises(ConfigError, match="paper_adloco: 'adloco' is the AdLoCo run"):
        workspace.claims([60], paper_adloco="adloco")
    with pytest.raises(ConfigError, match="paper_adloco"):
        workspace.claims([60], paper_adloco="diloco")
