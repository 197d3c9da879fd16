"""The page's sections on the runs (report/page/run_sections.py), on the engine fixture's report."""

from __future__ import annotations

from dataclasses import replace

from layout import body_rows

from adloco.report.analysis.summary import PER_RUN_KEYS
from adloco.report.page.run_sections import (
    PER_RUN,
    _merges_table,
    ladder_section,
    mechanisms_section,
    per_run_section,
)


def test_per_run_table_one_row_per_run_then_the_reference_levels(engine_report):
    _, found, page = engine_report
    rows = body_rows(per_run_section(page))
    assert [r[0] for r in rows] == [*found.names, "uniform", "unigram", "base model", "bigram"]
    diloco = rows[0]
    assert diloco[1:3] == ["DiLoCo baseline", "3"]
    column = {label: i for i, (_, label, _) in enumerate(PER_RUN, start=3)}
    # The page's columns are the numbers the findings spread over seeds, in that order.
    assert [key for key, _, _ in PER_RUN] == list(PER_RUN_KEYS)
    # Every seed of diloco trains 4,800 tokens in 25 communications: no spread to show.
    assert diloco[column["tokens"]] == "4,8004,800 – 4,800"
    assert rows[-1][:4] == ["bigram", "validation reference", "–", "55"]


def test_merges_table_and_its_absence(engine_report):
    _, _, page = engine_report
    one = {"run": "adloco", "seed": 0, "round": 3, "merged": [0, 1], "kept": 1,
           "before": {0: 52.0, 1: 50.5}, "after": 49.0, "after_round": 3}  # fmt: skip
    rows = body_rows(_merges_table(replace(page, found=replace(page.found, merges=[one]))))
    assert rows == [["adloco", "0", "3", "0, 1 → 1", "0: 52, 1: 50.5", "49", "3"]]
    assert "No merges in any run." in _merges_table(
        replace(page, found=replace(page.found, merges=[]))
    )


def test_mechanisms_one_row_per_check(engine_report):
    _, found, page = engine_report
    rows = body_rows(mechanisms_section(page))
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (c.run, c.mechanism, c.status, f"{c.seeds_observed}/{c.seeds}") for c in found.checks
    ]
    assert ("adloco-no-merge", "trainers merge", "off", "0/3") in [tuple(r[:4]) for r in rows]


def test_ladder_one_column_per_target_the_main_one_named(engine_report):
    _, found, page = engine_report
    html = ladder_section(page)
    # One table per quantity (time, communications, tokens, bytes), each with the main target.
    assert html.count("<table>") == html.count("ppl ≤ 47.2 (main)") == html.count("(main)") == 4
    for target in found.ladder.targets:
        assert f"ppl ≤ {target:g}" in html
