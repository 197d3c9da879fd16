"""The regime map (saturation batch against bandwidth) on runs whose ratio is known in closed form.

Two slots on two devices, no latency, a roofline of c seconds a sequence
flat up to S: a pass of b sequences costs c · max(b, S) (StepTimeCurve.roofline).
A ring all-reduce of V bytes over the two slots costs V / B at B bytes/s.

- AdLoCo: one round of 2 steps of a 16-sequence pass per slot, one all-reduce:
  T_a = 2 c max(16, S) + V / B.
- DiLoCo: four rounds of 1 step of a 4-sequence pass, one all-reduce each:
  T_d = 4 c max(4, S) + 4 V / B.

With x = V / B the ratio is (2 c max(16, S) + x) / (4 c max(4, S) + 4 x), which
crosses 1 at x = 16 c / 3 for S <= 4, at x = 4 c (8 - S) / 3 for 4 <= S <= 8,
and never for S >= 8 (AdLoCo is faster at every bandwidth). Three seeds with
V = V0, 2 V0, 4 V0: the median ratio is the 2 V0 seed's, the lowest ratio the
4 V0 seed's and the highest the V0 seed's.
"""

from __future__ import annotations

import json

import pytest
from results_folder import analysed

from adloco.config import load_config
from adloco.formats.clock import StepTimeCurve
from adloco.report.analysis.claims import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED
from adloco.report.analysis.regime_map import VerdictChange, crossings, regime_map, verdict_changes
from adloco.report.analysis.regime_sweep import RegimeCell, sweep_networks

C = 0.01  # seconds a sequence at saturation: the last segment of the runs' roofline
V0 = 4e6  # bytes of the all-reduce of seed 0
SATURATIONS = [1, 2, 4, 6, 8, 16]
CLUSTER = {
    "nodes_per_device": 1,
    "devices": [{"name": "cpu-t", "count": 2, "memory_gib": 0.5, "max_batch": 16}],
    "network": {"bandwidth_gbit_s": 1.0, "latency_s": 0.0},
}


def row(ppl: float, passes: int, batch: int, payload: float) -> dict:
    work = [
        {"slot": i, "device": "cpu-t", "device_index": i, "steps": [[passes, [batch]]]}
        for i in (0, 1)
    ]
    sync = {"nodes": 2, "allreduce_payload_bytes": [int(payload)]}
    return {"ppl": ppl, "slot_work": work, "sync": sync}


@pytest.fixture
def pair(workspace):
    ws = workspace
    payload = {0: V0, 1: 2 * V0, 2: 4 * V0}
    ws.run("adloco", ws.FULL_ADLOCO, {s: [[row(50, 2, 16, v)]] for s, v in payload.items()})
    four_rounds = (90, 80, 70, 55)
    ws.run(
        "diloco",
        {"method": "diloco"},
        {s: [[row(p, 1, 4, v)] for p in four_rounds] for s, v in payload.items()},
    )
    # The closed forms below charge whole rounds (report.between: round); the
    # interpolated reading is tested in test_summary.py and test_regime_sweep.py.
    config = load_config(
        ws.write([60], cluster=CLUSTER, saturation_batches=SATURATIONS, between="round")
    )
    record = {"device": "cpu-t", "model_parameters": 1_000_000, "seq_len_tokens": 100,
              "step_time": {"model": "roofline", "saturation_batch": 4},
              "step_time_curve": StepTimeCurve.roofline(C, 4).as_dict()}  # fmt: skip
    (ws.root / "calibration" / "cpu-t.json").write_text(json.dumps(record))
    runs, roles, ladder, settings = ws.load(
        [60], cluster=CLUSTER, saturation_batches=SATURATIONS, between="round"
    )
    grid = regime_map(
        runs, roles, 60.0, config.cluster, ws.root / "calibration", settings,
        sweep_networks(config.cluster.network, settings),
    )  # fmt: skip
    return grid, roles, settings


def ratio(s: int, bw_gbit: float, v: float) -> float:
    x = v / (bw_gbit * 1e9 / 8)
    return (2 * C * max(16, s) + x) / (4 * C * max(4, s) + 4 * x)


def crossing_gbit(s: int, v: float) -> float | None:
    x = 16 * C / 3 if s <= 4 else 4 * C * (8 - s) / 3 if s < 8 else None
    return None if x is None else v / x * 8 / 1e9


def test_every_cell_is_the_closed_form(pair):
    grid, _, _ = pair
    assert grid.saturations == tuple(SATURATIONS) and grid.own_saturation == 4
    cells = [c for c in grid.cells if c.against == "diloco"]
    assert len(cells) == len(SATURATIONS) * 2 * 9  # both policies, nine bandwidths
    for c in cells:
        expected = ratio(c.saturation_batch, c.bandwidth_gbit_s, 2 * V0)  # the middle seed
        assert c.effect.estimate == pytest.approx(expected, rel=1e-9)
        assert c.effect.interval.low == pytest.approx(
            ratio(c.saturation_batch, c.bandwidth_gbit_s, 4 * V0), rel=1e-9
        )
    own = [c for c in cells if c.own]
    assert [(c.saturation_batch, c.bandwidth_gbit_s, c.sharing) for c in own] == [
        (4, 1.0, "concurrent")
    ]


def test_the_crossing_line_and_its_band_are_the_closed_form(pair):
    grid, roles, settings = pair
    found = crossings(grid, roles, settings)
    for sharing in ("concurrent", "time_slicing"):
        for s in SATURATIONS:
            here = (sharing, "diloco", s)
            mine = {
                c.line: c.bandwidth_gbit_s
                for c in found
                if (c.sharing, c.against, c.saturation_batch) == here
            }
            if crossing_gbit(s, V0) is None:
                assert mine == {}, s  # AdLoCo faster at every bandwidth
                continue
            assert mine["median"] == pytest.approx(crossing_gbit(s, 2 * V0), rel=1e-6)
            # The interval's low end (the lowest ratio) is below 1 up to the 4 V0 seed's
            # crossing; its high end up to the V0 seed's.
            assert mine["low"] == pytest.approx(crossing_gbit(s, 4 * V0), rel=1e-6)
            assert mine["high"] == pytest.approx(crossing_gbit(s, V0), rel=1e-6)
    # S <= 4: x = 16 c / 3, so B = 3 V / (16 c): 1.2 Gbit/s for V = 8e6 bytes.
    assert crossing_gbit(2, 2 * V0) == pytest.approx(1.2)
    # The best baseline is DiLoCo itself here: the same line.
    best = [c for c in found if c.against == "best"]
    assert sorted(c.bandwidth_gbit_s for c in best) == pytest.approx(
        sorted(c.bandwidth_gbit_s for c in found if c.against == "diloco")
    )


def test_no_roofline_rates_no_map(pair, workspace):
    grid, roles, settings = pair
    (workspace.root / "calibration" / "cpu-t.json").unlink()
    config = load_config(workspace.root / "config.yaml")
    runs, *_ = workspace.load([60], cluster=CLUSTER, saturation_batches=SATURATIONS)
    cal_dir = workspace.root / "calibration"
    empty = regime_map(runs, roles, 60.0, config.cluster, cal_dir, settings, [])
    assert empty.cells == [] and empty.target == 60.0 and "no calibration file" in empty.note


def test_the_runs_own_saturation_and_bandwidth_reproduce_the_logged_times(engine_fixture):
    # The fixture's runs were charged with roofline(0.01 s, 4, update 0.001) at 1 Gbit/s.
    from adloco.report.analysis.ladder import to_target
    from adloco.report.analysis.regime_map import peak_seconds_per_sequence, roofline_rates
    from adloco.report.analysis.seed_stats import median

    f = engine_fixture
    config = load_config(f / "config.yaml")
    rates = roofline_rates(config.cluster, f / "calibration")
    assert rates.per_sequence_s == {"sim": pytest.approx(0.01)} and rates.own_saturation == 4
    assert peak_seconds_per_sequence(StepTimeCurve((1,), (0.3,), 0.0)) == pytest.approx(0.3)
    runs, roles, ladder, settings = analysed(config, f / "runs")
    grid = regime_map(
        runs, roles, ladder.main, config.cluster, f / "calibration", settings,
        sweep_networks(config.cluster.network, settings),
    )  # fmt: skip
    (own,) = [c for c in grid.cells if c.own and c.against == "diloco"]
    logged = {n: median(list(to_target(runs, n, ladder.main, "sim_time_s").values()))
              for n in ("adloco", "diloco")}  # fmt: skip
    assert own.adloco_median_s == pytest.approx(logged["adloco"], rel=1e-12)
    assert own.baseline_median_s == pytest.approx(logged["diloco"], rel=1e-12)


def knee_cell(s: int, verdict: str, bw: float = 1.0, sharing: str = "concurrent",
              against: str = "diloco", network: str = "") -> RegimeCell:  # fmt: skip
    return RegimeCell(60.0, "roofline", sharing, bw, against, "diloco", None, verdict, 1.0, 2.0,
                      False, s, 0.0, network)  # fmt: skip


def test_the_knee_where_claim_1s_verdict_changes_from_hand_made_rows():
    cells = [
        knee_cell(64, INCONCLUSIVE), knee_cell(16, NOT_SUPPORTED), knee_cell(32, INCONCLUSIVE),
        knee_cell(8, NOT_SUPPORTED),
        # Another bandwidth, policy, comparison or a brought network: not this row.
        knee_cell(32, SUPPORTED, bw=10.0), knee_cell(32, SUPPORTED, sharing="time_slicing"),
        knee_cell(32, SUPPORTED, against="best"), knee_cell(32, SUPPORTED, network="ib"),
    ]  # fmt: skip
    row, changes = verdict_changes(cells, "diloco", "concurrent", 1.0)
    assert row == [(8, NOT_SUPPORTED), (16, NOT_SUPPORTED), (32, INCONCLUSIVE), (64, INCONCLUSIVE)]
    assert changes == [VerdictChange(16, 32, NOT_SUPPORTED, INCONCLUSIVE)]
    # Two changes along the row, each between its neighbours.
    cells = [knee_cell(1, SUPPORTED), knee_cell(2, INCONCLUSIVE), knee_cell(4, INCONCLUSIVE),
             knee_cell(8, NOT_SUPPORTED)]  # fmt: skip
    _, changes = verdict_changes(cells, "diloco", "concurrent", 1.0)
    assert changes == [
        VerdictChange(1, 2, SUPPORTED, INCONCLUSIVE),
        VerdictChange(4, 8, INCONCLUSIVE, NOT_SUPPORTED),
    ]
    # The same verdict at every knee: no change; nothing swept at that bandwidth: no row.
    same = [knee_cell(s, INCONCLUSIVE) for s in (1, 2, 4)]
    assert verdict_changes(same, "diloco", "concurrent", 1.0) == (
        [(1, INCONCLUSIVE), (2, INCONCLUSIVE), (4, INCONCLUSIVE)],
        [],
    )
    assert verdict_changes(same, "diloco", "concurrent", 0.5) == ([], [])


def test_the_knee_row_of_a_real_map_is_its_swept_saturations(pair):
    grid, _, _ = pair
    row, changes = verdict_changes(grid.cells, "diloco", "concurrent", 1.0)
    assert [s for s, _ in row] == SATURATIONS
    # Each change sits between neighbours whose cells say those verdicts.
    verdicts = dict(row)
    for c in changes:
        assert (verdicts[c.below], verdicts[c.above]) == (c.before, c.after) != (c.after, c.after)
