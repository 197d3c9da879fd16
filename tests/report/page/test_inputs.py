"""The page's sections on the inputs (report/page/inputs.py): variance and calibration."""

from __future__ import annotations

from pathlib import Path

from layout import body_rows

from adloco.formats.clock import StepTimeCurve
from adloco.report.analysis.regime_sweep import ClockModel
from adloco.report.inputs.results import Calibration, Variance
from adloco.report.page.inputs import calibration_section, variance_section


def test_variance_fields_in_words_the_nested_ones_too_and_the_rest_named():
    summary = {"trace_cov": 20.0, "grad_sqnorm": 0.5, "b_simple": 40.0, "eta": 0.3,
               "cheap": {"b_simple": 38.0}, "extra_count": 7, "label": "x"}  # fmt: skip
    html = variance_section(Variance(Path("var"), summary, None, None, ["no table"]), None, None)
    rows = body_rows(html)
    values = {r[0]: r[1] for r in rows}
    assert values["per-sample gradient variance tr Σ (exact, over the fixed sample)"] == "20"
    assert values["squared norm of the full gradient ‖∇F‖²"] == "0.5"
    assert values["noise scale B_simple = tr Σ / ‖∇F‖²"] == "40"
    assert values["B_simple from the engine's estimates"] == "38"
    assert values["norm-test η"] == "0.3"
    assert len(rows) == 5  # trace_cov, grad_sqnorm, b_simple, eta, cheap.b_simple
    assert "Other numeric fields of variance.json: extra_count." in html
    assert "no table." in html and html.count("Not drawn:") == 2


def test_calibration_rows_and_the_curves_of_the_clock_models():
    calibrations = [
        Calibration("sim", "config", {"device": "sim", "kind": "cpu", "max_batch": 4}, None),
        Calibration("gpu", "file", {"device": "gpu", "kind": "cuda", "memory_bytes": 2**31,
                                    "max_batch": 64, "step_time": {"model": "roofline"}},
                    Path("gpu.json")),
    ]  # fmt: skip
    curve = StepTimeCurve((1, 4), (0.01, 0.02), 0.005)
    models = [ClockModel("run", "the runs' own curve", {"gpu": curve}, ""),
              ClockModel("measured", "measured", None, "not available")]  # fmt: skip
    html = calibration_section(calibrations, models)
    devices, curves = body_rows(html, 0), body_rows(html, 1)
    assert devices[0][:3] == ["sim", "configured max_batch", "cpu"]
    assert devices[0][6] == "4" and devices[0][3] == "–"  # no memory known for a fixed one
    assert devices[1][:4] == ["gpu", "calibration file", "cuda", "2 GiB"]
    assert devices[1][-1] == "roofline"
    text = "pass time by micro-batch 1: 0.01 s, 4: 0.02 s; update 0.005 s"
    assert curves == [["the runs' own curve", "gpu", text]]
