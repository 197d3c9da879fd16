"""The page's evidence sections (report/page/evidence.py), on the engine fixture's report."""

from __future__ import annotations

from layout import body_rows

from adloco.report.page.evidence import rules_section, targets_section


def test_targets_against_the_references_and_the_base_model(engine_report):
    _, found, page = engine_report
    rows = body_rows(targets_section(page))
    assert [r[0] for r in rows[:4]] == ["uniform", "unigram", "bigram", "base model"]
    # The base model: exp(0.01) - 1 = 1.005 % evaluation s.e., 9,600 tokens, 40 steps.
    assert rows[3][1:3] == ["± 1 % (evaluation s.e.), 9,600 tokens, 40 steps", "64"]
    targets = rows[4:]
    assert [r[2] for r in targets] == [f"{t:g}" for t in found.ladder.targets]
    main = targets[-1]
    assert main[0] == "target (main)"
    # 47.2 / 120 and 47.2 / 55: below the unigram perplexity, so testable.
    assert main[3:] == ["0.393× unigram · 0.858× bigram", "testable"]


def test_rules_one_row_per_comparison_and_a_column_per_rule(engine_report):
    _, found, page = engine_report
    html = rules_section(page)
    rows = body_rows(html)
    headline = [c for claim in found.claims for c in claim.headline]
    assert len(rows) >= len(headline)
    assert "reached: first" in html and "pairing: none" in html
    assert "between: interpolated" in html and "merged: next_evaluation" in html
    assert "communications: trainer_rounds" in html
    assert all(len(r) == len(rows[0]) == 10 for r in rows)
