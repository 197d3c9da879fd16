"""Missing or malformed inputs give a clear error naming the file; optional parts do not."""

from __future__ import annotations

import json
import shutil

import pytest

from adloco.cli import main
from adloco.config import load_config
from adloco.report.inputs.results import load_calibration, load_runs, load_variance, read_metrics


@pytest.fixture
def tree(tmp_path, fixtures_dir):
    """A writable copy of the hand-made results tree."""
    shutil.copytree(fixtures_dir, tmp_path / "f")
    return tmp_path / "f"


def test_missing_run_lists_the_missing_file(tree):
    config = load_config(tree / "config.yaml")
    shutil.rmtree(tree / "runs" / "adloco-no-merge")
    with pytest.raises(FileNotFoundError, match=r"adloco-no-merge/seed0/metrics.jsonl"):
        load_runs(tree / "runs", config)


def test_missing_runs_folder(tree):
    config = load_config(tree / "config.yaml")
    with pytest.raises(FileNotFoundError, match="runs folder not found"):
        load_runs(tree / "nowhere", config)


def test_malformed_line_names_file_and_line(tree):
    path = tree / "runs" / "diloco" / "seed0" / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:40]  # a truncated write
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not valid JSON"):
        read_metrics(path)


def test_row_missing_required_key(tree):
    path = tree / "runs" / "diloco" / "seed0" / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    del rows[2]["communications"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"metrics.jsonl:3: missing key 'communications'"):
        read_metrics(path)


def test_empty_metrics(tree):
    path = tree / "runs" / "diloco" / "seed0" / "metrics.jsonl"
    path.write_text("")
    with pytest.raises(ValueError, match="no metrics rows"):
        read_metrics(path)


def test_missing_summary_means_unfinished_run(tree):
    config = load_config(tree / "config.yaml")
    (tree / "runs" / "adloco" / "seed0" / "summary.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"adloco/seed0/summary.json: summary not found"):
        load_runs(tree / "runs", config)


def test_summary_disagreeing_with_metrics(tree):
    config = load_config(tree / "config.yaml")
    path = tree / "runs" / "adloco" / "seed0" / "summary.json"
    summary = json.loads(path.read_text())
    summary["rounds"] = 7
    path.write_text(json.dumps(summary))
    with pytest.raises(ValueError, match="says 7 rounds but .* ends at round 4"):
        load_runs(tree / "runs", config)


def test_rows_of_another_method(tree):
    config = load_config(tree / "config.yaml")
    path = tree / "runs" / "diloco" / "seed0" / "metrics.jsonl"
    path.write_text(path.read_text().replace('"method": "diloco"', '"method": "localsgd"'))
    with pytest.raises(ValueError, match="rows name method"):
        load_runs(tree / "runs", config)


def test_calibration_missing_and_malformed(tree):
    config = load_config(tree / "config.yaml")
    calibrations = load_calibration(tree / "calibration", config.cluster)
    assert [(c.device, c.source) for c in calibrations] == [
        ("cpu-fix", "file"),
        ("cpu-fixed", "config"),  # max_batch fixed in the config: no file needed
    ]
    assert calibrations[0].fields["max_batch"] == 8
    assert calibrations[1].fields["max_batch"] == 16
    (tree / "calibration" / "cpu-fix.json").write_text("{not json")
    with pytest.raises(ValueError, match="cpu-fix.json: not valid JSON"):
        load_calibration(tree / "calibration", config.cluster)
    (tree / "calibration" / "cpu-fix.json").unlink()
    with pytest.raises(FileNotFoundError, match="cpu-fix.json: calibration not found"):
        load_calibration(tree / "calibration", config.cluster)


def test_variance_required_and_optional_parts(tree):
    variance = load_variance(tree / "variance")
    assert variance.summary["b_simple"] == 150.0
    assert [row["deviation_sqnorm"] for row in variance.per_batch][:2] == [101.5, 98.0]
    assert variance.notes == []
    (tree / "variance" / "per_batch.csv").unlink()
    (tree / "variance" / "deviations.png").unlink()
    partial = load_variance(tree / "variance")
    assert partial.per_batch is None and partial.deviations_png is None
    assert len(partial.notes) == 2
    (tree / "variance" / "variance.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="variance.json: expected a JSON object"):
        load_variance(tree / "variance")
    (tree / "variance" / "variance.json").unlink()
    with pytest.raises(FileNotFoundError, match="variance.json: variance results not found"):
        load_variance(tree / "variance")


def test_cli_reports_a_missing_input_in_one_line(tree, tmp_path, capsys):
    shutil.rmtree(tree / "variance")
    code = main(
        [
            "report",
            "--config",
            str(tree / "config.yaml"),
            "--runs",
            str(tree / "runs"),
            "--calibration",
            str(tree / "calibration"),
            "--variance",
            str(tree / "variance"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "adloco report: error:" in err and "variance folder not found" in err
    assert not (tmp_path / "out" / "index.html").exists()


def test_each_run_is_read_for_its_own_seeds(workspace):
    ws = workspace
    ws.run("diloco", {"method": "diloco"}, {s: ws.single([100, 60]) for s in range(8)})
    ws.run("adloco-no-merge", {**ws.FULL_ADLOCO, "merge": "none"},
           {s: ws.single([100, 60]) for s in (0, 1, 2)})  # fmt: skip
    config = load_config(ws.write([60]))
    assert config.run_seeds("diloco") == list(range(8))  # the config's seeds
    assert config.run_seeds("adloco-no-merge") == [0, 1, 2]
    runs = load_runs(ws.runs_dir, config)
    assert [(r.run, r.seed) for r in runs if r.run == "adloco-no-merge"] == [
        ("adloco-no-merge", 0), ("adloco-no-merge", 1), ("adloco-no-merge", 2)
    ]  # fmt: skip
    assert sum(r.run == "diloco" for r in runs) == 8
    # A missing seed of a run's own list is named.
    import shutil

    shutil.rmtree(ws.runs_dir / "adloco-no-merge" / "seed2")
    with pytest.raises(FileNotFoundError, match=r"adloco-no-merge/seed2/metrics.jsonl"):
        load_runs(ws.runs_dir, config)
