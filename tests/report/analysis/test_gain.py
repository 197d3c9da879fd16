"""Each run's share of the ddp anchor's log-perplexity gain, against a hand computation."""

from __future__ import annotations

import math

import pytest

from adloco.report.analysis.gain import gain_shares


def test_shares_are_log_gains_over_ddps(workspace):
    ws = workspace
    # Final perplexities (the last evaluation): diloco 80 and 90 (median 85), ddp 50, adloco 95.
    ws.run("diloco", {"method": "diloco"}, {0: ws.single([99, 80]), 1: ws.single([99, 90])})
    ws.run("ddp", {"method": "ddp"}, {0: ws.single([90, 50]), 1: ws.single([90, 50])})
    ws.run("adloco", ws.FULL_ADLOCO, {0: ws.single([99, 95]), 1: ws.single([99, 95])})
    runs, *_ = ws.load([60])
    got = gain_shares(runs, "ddp", 100.0)
    full = math.log(100 / 50)
    assert got.shares == {
        "adloco": pytest.approx(math.log(100 / 95) / full),  # 0.074
        "ddp": pytest.approx(1.0),
        "diloco": pytest.approx(math.log(100 / 85) / full),  # 0.234
    }
    assert got.note == ""
    # Climbs: highest evaluation over the base, median over seeds: diloco 99, ddp 90, adloco 99.
    assert got.climbs == pytest.approx({"diloco": 0.99, "ddp": 0.9, "adloco": 0.99})
    # A run that ends above the base has a negative share.
    assert gain_shares(runs, "ddp", 90.0).shares["adloco"] == pytest.approx(
        math.log(90 / 95) / math.log(90 / 50)
    )


def test_no_share_without_base_ddp_or_a_ddp_gain(workspace):
    ws = workspace
    ws.run("ddp", {"method": "ddp"}, {0: ws.single([90, 50])})
    runs, *_ = ws.load([60])
    assert gain_shares(runs, "ddp", None).note.startswith("no base")
    assert gain_shares(runs, None, 100.0).note == "no ddp run"
    assert gain_shares(runs, "ddp", 40.0).as_dict() == {
        "shares": {},
        "note": "ddp does not end below the base",
        "climbs": {"ddp": 90 / 40},
    }
    assert gain_shares(runs, "ddp", None).climbs == {}


def test_the_answer_states_each_share():
    from types import SimpleNamespace

    from adloco.report.analysis.gain import GainShares
    from adloco.report.page.verdicts import gain_paragraph

    gains = GainShares({"adloco": 0.074, "diloco": 0.234, "ddp": 1.0},
                       climbs={"adloco": 0.99, "diloco": 1.0114})  # fmt: skip
    text = gain_paragraph(SimpleNamespace(found=SimpleNamespace(gains=gains)))
    assert "adloco 7%, diloco 23%, ddp 100%" in text and "share" in text
    assert "without first climbing above it): adloco 0.990×, diloco 1.011×." in text
