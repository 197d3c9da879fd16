"""The page's regime section (report/page/regime_section.py): the map's table, its cells."""

from __future__ import annotations


def test_the_map_table_names_each_crossing_bandwidth_or_the_side_without_one():
    from types import SimpleNamespace as NS

    from adloco.report.page.regime_section import MAP_GROUPS, _map_row, _no_crossing

    def cell(estimate, verdict="inconclusive", sharing="concurrent", against="diloco", s=4):
        return NS(sharing=sharing, against=against, saturation_batch=s, verdict=verdict,
                  effect=NS(estimate=estimate))  # fmt: skip

    assert _no_crossing([cell(0.5), cell(0.9)]) == "AdLoCo faster at every bandwidth"
    assert _no_crossing([cell(1.0), cell(2.0)]) == "AdLoCo slower at every bandwidth"
    assert _no_crossing([cell(0.5, "supported"), cell(2.0, "not supported")]) == (
        "several crossings"
    )
    assert _no_crossing([cell(0.5), cell(2.0)]) == "–"

    def crossing(line, bandwidth):
        return NS(sharing="concurrent", against="diloco", saturation_batch=4, line=line,
                  bandwidth_gbit_s=bandwidth)  # fmt: skip

    cells = [cell(0.5, against="best"), cell(2.0, sharing="time_slicing")]
    regimes = NS(grid=NS(cells=cells, own_saturation=4),
                 crossings=[crossing("median", 0.5), crossing("high", 0.2),
                            crossing("low", 2.0)])  # fmt: skip
    row = _map_row(regimes, 4)
    assert len(row) == 1 + len(MAP_GROUPS)
    assert row[0] == "4 (runs')"
    # Concurrent against DiLoCo: the median's crossing, then its interval's (highest first).
    assert row[1] == "500 Mbit/s<small>200 Mbit/s – 2 Gbit/s</small>"
    assert row[2] == "AdLoCo faster at every bandwidth"  # concurrent, best: no crossing
    assert row[3] == "AdLoCo slower at every bandwidth"  # time slicing, diloco


def test_a_cell_is_coloured_by_the_report_verdict_and_a_censored_ratio_is_no_number():
    import math
    from types import SimpleNamespace as NS

    from adloco.report.page.regime_section import _cell

    def cell(estimate, verdict, own=False):
        return NS(verdict=verdict, own=own, effect=NS(estimate=estimate, interval=None))

    assert _cell(cell(0.5, "supported", own=True)) == "<span class='supported own'>0.5</span>"
    assert _cell(cell(1.3, "not supported")) == "<span class='not-supported'>1.3</span>"
    # The baseline never gets there: the ratio tends to 0, it is not 0.
    assert _cell(cell(0.0, "inconclusive")) == "<span class='inconclusive'>→ 0</span>"
    assert _cell(cell(math.inf, "not testable")) == "<span class='not-testable'>→ ∞</span>"
