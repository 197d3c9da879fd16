"""The tuning record: written by the tuning experiment's report, shown by the default's."""

from __future__ import annotations

import json

import pytest

from adloco.config import ConfigError, load_config
from adloco.report import build_report
from adloco.report.inputs import load_runs
from adloco.report.tuning import load_tuning, tuning_record, tuning_table


def grid(ws):
    # adloco at lr 0.001, 0.003, 0.01: final perplexities (median over seeds 0-2)
    # 70 (70, 71, 69), 60 (61, 60, 59) and 60 (58, 60, 62): a tie at 60 goes to 0.003.
    finals = {0.001: (70, 71, 69), 0.003: (61, 60, 59), 0.01: (58, 60, 62)}
    for lr, ppl in finals.items():
        ws.run(
            f"tune-adloco-lr{lr:g}".replace(".", "_"),
            {**ws.FULL_ADLOCO, "inner_lr": lr},
            {s: ws.pair([90, p], [95, p]) for s, p in enumerate(ppl)},
        )
    ws.run("tune-diloco-lr0_003", {"method": "diloco", "inner_lr": 0.003},
           {s: ws.single([100, 80]) for s in range(3)})  # fmt: skip


def test_the_tuning_experiment_writes_its_record(workspace):
    grid(workspace)
    groups = {
        "adloco": ["tune-adloco-lr0_01", "tune-adloco-lr0_001", "tune-adloco-lr0_003"],
        "diloco": ["tune-diloco-lr0_003"],
    }
    config = load_config(workspace.write([60], tuning_groups=groups))
    runs = load_runs(workspace.runs_dir, config)
    record = tuning_record(config, runs, {k: tuple(v) for k, v in groups.items()})
    adloco = record["groups"]["adloco"]
    assert adloco["inner_lr"] == [0.001, 0.003, 0.01]  # sorted by lr
    assert adloco["value"] == [70.0, 60.0, 60.0] and adloco["chosen"] == 0.003
    assert record["groups"]["diloco"] == {
        "inner_lr": [0.003], "value": [80.0], "runs": ["tune-diloco-lr0_003"], "chosen": 0.003
    }  # fmt: skip
    assert record["metric"] == "final_val_perplexity" and record["seeds"] == [0, 1, 2]
    with pytest.raises(ConfigError, match="report.tuning_groups.adloco: no run named nope"):
        tuning_record(config, runs, {"adloco": ("nope",)})


def test_build_report_writes_tuning_json_and_the_default_shows_it(workspace, tmp_path):
    grid(workspace)
    groups = {"adloco": ["tune-adloco-lr0_001", "tune-adloco-lr0_003", "tune-adloco-lr0_01"]}
    ws = workspace
    config = ws.write([60], tuning_groups=groups)
    out = tmp_path / "tune-report"
    build_report(config, ws.runs_dir, ws.root / "calibration", ws.root / "variance", out)
    record = json.loads((out / "tuning.json").read_text())
    assert record["groups"]["adloco"]["chosen"] == 0.003

    # The default config (here: the same runs) names the record; its page shows the grid.
    config = ws.write([60], tuning=str(out / "tuning.json"))
    page_dir = tmp_path / "default-report"
    build_report(config, ws.runs_dir, ws.root / "calibration", ws.root / "variance", page_dir)
    page = (page_dir / "index.html").read_text()
    assert "0.001: 70; 0.003: 60; 0.01: 60" in page
    assert not (page_dir / "tuning.json").exists()


def test_tuning_table_flags_a_configured_lr_that_differs(tmp_path):
    path = tmp_path / "tuning.json"
    record = {"experiment": "tune", "seed": 100, "metric": "final_val_perplexity",
              "groups": {"adloco": {"inner_lr": [0.001, 0.003], "value": [70.0, 60.0],
                                    "chosen": 0.003},
                         "localsgd": {"inner_lr": [0.1, 0.3], "value": [90.0, 80.0],
                                      "chosen": 0.3}}}  # fmt: skip
    path.write_text(json.dumps(record))
    rows = tuning_table(load_tuning(path), {"adloco": 0.003, "localsgd": 0.1})
    assert [(r["run"], r["chosen"], r["configured"], r["differs"]) for r in rows] == [
        ("adloco", 0.003, 0.003, False),
        ("localsgd", 0.3, 0.1, True),
    ]
    assert rows[0]["grid"] == [(0.001, 70.0), (0.003, 60.0)]
    assert load_tuning(None) is None
    path.write_text(json.dumps({"groups": {"adloco": {"inner_lr": [1], "value": []}}}))
    with pytest.raises(ValueError, match="groups.adloco: inner_lr and value"):
        load_tuning(path)
