"""Targets fixed before the runs (base fractions, perplexities), derived ones, the unigram rule."""

from __future__ import annotations

import pytest

from adloco.config import ConfigError, section
from adloco.report.analysis.targets import ceil_significant
from adloco.report.inputs.references import load_base, load_references
from adloco.report.settings import ReportSettings


def targets(**fields) -> ReportSettings:
    """The settings of a ``report`` section with these ``targets``, the schema's defaults for
    the rest."""
    return ReportSettings.from_section(section("report", {"targets": fields}))


def test_ceil_significant():
    assert ceil_significant(47.23) == 47.3
    assert ceil_significant(1234.0) == 1240.0
    assert ceil_significant(60.0) == 60.0


def test_targets_are_fractions_of_the_base_perplexity(workspace):
    workspace.two_seed_runs()
    base = load_base(workspace.base(120.0))
    _, _, ladder, _ = workspace.load(
        references=None,
        base=base,
        targets_section={"relative_to": "base", "levels": [0.9, 0.75, 0.5], "main": 0.75},
    )
    # 0.9, 0.75, 0.5 of 120: 108, 90, 60 — the main 0.75 x 120.
    assert ladder.targets == pytest.approx((108.0, 90.0, 60.0))
    assert ladder.main == pytest.approx(90.0) and ladder.source == "base"
    assert ladder.level_text(ladder.main) == "0.75 × base"
    assert "fixed before the runs" in ladder.note and "120" in ladder.note


def test_base_targets_without_a_base_model_are_one_clear_error(workspace):
    workspace.two_seed_runs()
    with pytest.raises(ConfigError, match="relative_to: base needs the base model"):
        workspace.load(targets_section={"relative_to": "base", "levels": [0.9]})


def test_base_levels_must_be_fractions_and_main_one_of_them():
    with pytest.raises(ConfigError, match="1.5 is not a fraction below 1"):
        targets(relative_to="base", levels=[0.9, 1.5])
    with pytest.raises(ConfigError, match="0.8 is not one of report.targets.levels"):
        targets(relative_to="base", levels=[0.9], main=0.8)
    default = ReportSettings.from_section(section("report", {}))
    assert (default.section.targets.relative_to, default.levels, default.main) == (
        "base",
        (0.95, 0.9, 0.85),
        None,
    )


def test_derived_targets_are_an_explicit_option_and_said_so(workspace):
    workspace.two_seed_runs()
    _, _, ladder, _ = workspace.load(derived_levels=2)
    # Hardest: the highest best among adloco and diloco seeds = max(60, 70, 50, 65) = 70.
    # Easiest bound: the lowest first evaluation = min(100, 110, 90, 95) = 90.
    # Two levels: 70 * (90/70)^(0/2) = 70 and 70 * (90/70)^(1/2) = 79.37 -> 79.4.
    assert ladder.targets == (79.4, 70.0)
    assert ladder.main == 70.0 and ladder.source == "derived"
    assert "not fixed before them" in ladder.note and "adloco, diloco" in ladder.note


def test_unknown_derived_run_is_named(workspace):
    workspace.two_seed_runs()
    with pytest.raises(ConfigError, match="report.targets.derived_runs: no run named nope"):
        workspace.load(derived_runs=["nope"])


def test_a_target_at_or_above_unigram_is_not_testable(workspace):
    workspace.two_seed_runs()
    refs = load_references(workspace.manifest(uniform=512.0, unigram=90.0, bigram=40.0))
    assert refs.levels == {"uniform": 512.0, "unigram": 90.0, "bigram": 40.0}
    assert refs.details["counts_from"] == ["train"] and not refs.note
    _, _, ladder, _ = workspace.load([95, 90, 60], references=refs)
    # 95 and 90 are at or above the unigram level 90; 60 is below it.
    assert set(ladder.untestable) == {95.0, 90.0}
    assert "unigram perplexity 90" in ladder.untestable[90.0] and not ladder.caveat
    claims = workspace.claims([95, 60], main=95, references=refs)
    head = claims[1].headline[0]
    assert head.verdict == "not testable" and "token frequencies" in head.reason
    at_60 = next(c for c in claims[1].comparisons if c.target == 60 and c.against == "diloco")
    assert at_60.verdict != "not testable"
