"""Devices and networks brought from elsewhere: a hand-recomputed example, refusals, the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adloco.config import load_config
from adloco.formats.clock import StepTimeCurve
from adloco.report.analysis.regime_sweep import brought_model, regime_cells, sweep_networks
from adloco.report.inputs.devices import (
    check_devices,
    load_device_file,
    logged_pass_sizes,
    parse_network,
    parse_roofline,
)

# Measured on "another machine": passes of 1, 4 and 8 sequences, and an update.
CURVE = {"batches": [1, 4, 8], "fwd_bwd_s": [0.1, 0.2, 0.4], "update_s": 0.05}


def one_slot(ppl: float, steps: list) -> dict:
    work = [{"slot": 0, "device": "cpu-t", "device_index": 0, "steps": steps}]
    return {"ppl": ppl, "slot_work": work, "sync": {"nodes": 1, "allreduce_payload_bytes": [8]}}


@pytest.fixture
def two_passes(workspace):
    # AdLoCo: one round of two steps, a pass of 3 sequences then one of 5. DiLoCo: one
    # round of one step of 4. One slot, so no all-reduce and no sharing.
    ws = workspace
    ws.run("adloco", ws.FULL_ADLOCO, {0: [[one_slot(50, [[1, [3]], [1, [5]]])]]})
    ws.run("diloco", {"method": "diloco"}, {0: [[one_slot(55, [[1, [4]]])]]})
    return ws


RUNS_MODEL = {"model_parameters": 1000, "seq_len_tokens": 64}


def device_file(ws, name="gpu.json", **fields) -> str:
    record = {"device": "cpu-t", "gpu_name": "NVIDIA H100", "model_parameters": 1000,
              "seq_len_tokens": 64, "step_time_measured": CURVE, **fields}  # fmt: skip
    path = ws.root / name
    path.write_text(json.dumps(record))
    return str(path)


def test_a_two_pass_example_recomputed_by_hand(two_passes):
    ws = two_passes
    runs, roles, ladder, settings = ws.load([60])
    config = load_config(ws.root / "config.yaml")
    device = load_device_file(ws.root / device_file(ws), RUNS_MODEL)
    assert device.name == "NVIDIA H100" and device.curve == StepTimeCurve.from_dict(CURVE)
    # By hand: pass(3) = 0.1 + (0.2 - 0.1)(3 - 1)/(4 - 1) = 0.16667 s; pass(5) = 0.2 +
    # (0.4 - 0.2)(5 - 4)/(8 - 4) = 0.25 s; two updates of 0.05 s: 0.51667 s for AdLoCo.
    # DiLoCo: pass(4) = 0.2 s and one update: 0.25 s.
    adloco_s = 0.1 + 0.1 * 2 / 3 + 0.25 + 2 * 0.05
    cells = regime_cells(
        runs, roles, ladder.targets, config.cluster, [brought_model(device, ["cpu-t"])], settings,
        sweep_networks(config.cluster.network, settings, (parse_network("lan=10,0.001"),)),
    )  # fmt: skip
    assert {c.clock for c in cells} == {"device:NVIDIA H100"}
    for c in cells:
        assert c.adloco_median_s == pytest.approx(adloco_s)
        assert c.baseline_median_s == pytest.approx(0.25)
        assert c.effect.estimate == pytest.approx(adloco_s / 0.25)
    assert {c.network for c in cells} == {"", "lan"}
    assert logged_pass_sizes(runs, ["adloco", "diloco"], "concurrent") == {3, 4, 5}


def test_a_curve_missing_a_logged_pass_size_is_refused(two_passes):
    ws = two_passes
    runs, *_ = ws.load([60])
    short = load_device_file(
        ws.root / device_file(ws, "short.json", step_time_measured={
            "batches": [1, 4], "fwd_bwd_s": [0.1, 0.2], "update_s": 0.0}),
        RUNS_MODEL,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"device NVIDIA H100: .* passes of 5 sequences"):
        check_devices([short], runs, ["adloco", "diloco"])
    late = parse_roofline("fast=0.001,8")  # a roofline covers every size by construction
    check_devices([late], runs, ["adloco", "diloco"])


def test_specs_and_a_device_of_another_model_are_refused(workspace):
    device = parse_roofline("fast=0.002,16,0.001")
    assert device.curve == StepTimeCurve.roofline(0.002, 16, 0.001)
    net = parse_network("ib=100,0.000005")
    assert (net.name, net.bandwidth_gbit_s, net.latency_s) == ("ib", 100.0, 5e-06)
    for bad in ("fast", "fast=0,8", "fast=0.1,2.5", "fast=x,1"):
        with pytest.raises(ValueError, match="--roofline"):
            parse_roofline(bad)
    with pytest.raises(ValueError, match="--network"):
        parse_network("wan=0,0.01")
    path = workspace.root / device_file(workspace)
    with pytest.raises(ValueError, match="model_parameters 1000, the runs' model has 2000"):
        load_device_file(path, {"model_parameters": 2000, "seq_len_tokens": 64})
    (workspace.root / "old.json").write_text(json.dumps({"device": "x"}))
    with pytest.raises(ValueError, match="no step_time_measured"):
        load_device_file(workspace.root / "old.json", RUNS_MODEL)
    # A file that does not say which model it timed: refused, whatever its curve.
    unnamed = workspace.root / "unnamed.json"
    record = json.loads(Path(device_file(workspace)).read_text())
    unnamed.write_text(json.dumps({k: v for k, v in record.items() if k != "model_parameters"}))
    with pytest.raises(ValueError, match="has no model_parameters.*adloco calibrate"):
        load_device_file(unnamed, RUNS_MODEL)
