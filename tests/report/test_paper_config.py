"""Claim 1 answered twice: for the tuned AdLoCo and for the paper's configuration."""

from __future__ import annotations

import pytest

from adloco.config import ConfigError
from adloco.report.analysis.claims import PAPER
from adloco.report.analysis.verdict import NOT_SUPPORTED, SUPPORTED

EIGHT = tuple(range(8))


def runs(ws):
    """diloco reaches 60 at round 3 (3 s); the tuned adloco (one trainer) at round 2 (2 s);
    the paper's configuration (two trainers) at round 4 (4 s), on eight seeds."""
    ws.run("diloco", {"method": "diloco"}, {s: ws.single([90, 70, 60]) for s in EIGHT})
    tuned = {**ws.FULL_ADLOCO, "initial_trainers": 1}
    ws.run("adloco", tuned, {s: ws.single([80, 59]) for s in EIGHT})
    ws.run("adloco-paper", ws.FULL_ADLOCO,
           {s: ws.pair([95, 80, 70, 59], [96, 81, 71, 62]) for s in EIGHT})  # fmt: skip


def test_claim_1_for_the_paper_configuration_names_what_decides_it(workspace):
    runs(workspace)
    claim = workspace.claims([60], paper_adloco="adloco-paper")[1]
    assert claim.verdict == SUPPORTED  # the tuned run: 2 s against 3 s on every seed
    paper = next(c for c in claim.comparisons if c.against == PAPER)
    assert paper.subject == "adloco-paper" and paper.baseline == "diloco"
    assert paper.subject_values == dict.fromkeys(EIGHT, 4.0)
    assert paper.verdict == NOT_SUPPORTED  # 4 s against 3 s on every seed
    assert "In the paper's configuration (adloco-paper): not supported" in claim.reason
    assert "differs from it in initial_trainers 1 against 2, which decides the claim" in (
        claim.reason
    )
    assert not paper.headline  # the claim's verdict is the tuned run's


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
