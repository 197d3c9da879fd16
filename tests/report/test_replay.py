"""``adloco regimes`` (report/replay.py) and the replay script: the runs replayed elsewhere."""

from __future__ import annotations

import csv
import json

import yaml

from adloco.cli import main
from adloco.config import load_config


def test_adloco_regimes_writes_the_table_and_figures(engine_fixture, tmp_path, capsys):
    f = engine_fixture
    common = ["--config", str(f / "config.yaml"), "--runs", str(f / "runs"),
              "--calibration", str(f / "calibration")]  # fmt: skip
    out = tmp_path / "byod"
    rc = main(["regimes", *common, "--roofline", "fast=0.001,8",
               "--network", "ib=100,0.00001", "--out", str(out)])  # fmt: skip
    assert rc == 0
    with open(out / "regimes.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    mine = [r for r in rows if r["clock"] == "device:fast"]
    assert {r["network"] for r in mine} == {"", "ib"}
    # Claim 1 against every baseline alone, beside DiLoCo and the best one.
    assert {r["against"] for r in mine} >= {"diloco", "best", "baseline:diloco-big",
                                             "baseline:localsgd"}  # fmt: skip
    assert any(r["clock"] == "roofline" and r["saturation_batch"] == "4" for r in rows)
    assert (out / "figures" / "regimes.png").is_file()
    assert (out / "figures" / "regime_map.png").is_file()
    doc = json.loads((out / "regimes.json").read_text())
    assert doc["devices"][0]["name"] == "fast" and "memory" in doc["sweeps"]["brought devices"][
        "cannot_vary"]  # fmt: skip
    # A measured curve that stops short of the runs' passes: refused, naming device and size.
    short = tmp_path / "short.json"
    short.write_text(json.dumps({"device": "sim", "gpu_name": "Tiny GPU", "step_time_measured":
                                 {"batches": [1, 2], "fwd_bwd_s": [0.1, 0.2]}}))  # fmt: skip
    rc = main(["regimes", *common, "--device", str(short), "--out", str(tmp_path / "no")])
    assert rc == 1
    assert "device Tiny GPU" in capsys.readouterr().err


def test_the_replay_script_times_this_device_at_the_runs_max_batch(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "scripts" / "replay-on-this-device.py"
    spec = importlib.util.spec_from_file_location("replay_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    from adloco.config import read_yaml

    path = Path(__file__).parents[2] / "config" / "config.yaml"
    config = load_config(path)
    (tmp_path / "cpu-sim.json").write_text(json.dumps({"device": "cpu-sim", "max_batch": 5}))
    measured = script.calibrate_config(path, tmp_path, "cuda")
    (device,) = measured["cluster"]["devices"]
    # The runs' max batch fixed (no search; timing up to nodes_per_device x 5 sequences),
    # the curve measured here, memory enough to time it.
    assert (device["kind"], device["max_batch"], device["step_time"]["model"]) == (
        "cuda",
        5,
        "measured",
    )
    assert device["memory_gib"] == script.TIMING_MEMORY_GIB
    assert measured["model"] == read_yaml(path)["model"]
    assert config.cluster.devices[0].kind == "cpu"
    # The file written is a valid configuration whose device is the measured one.
    written = tmp_path / "calibrate.yaml"
    written.write_text(yaml.safe_dump(measured))
    (typed,) = load_config(written).cluster.devices
    assert (typed.kind, typed.max_batch, typed.step_time.scale) == ("cuda", 5, 1.0)
