"""Tests of adloco.variance.outputs: the folder's files and the histogram."""

from __future__ import annotations

import csv
import json

import pytest

from adloco.variance import VarianceAnalysis, plot_deviations, write_outputs

PNG = b"\x89PNG\r\n\x1a\n"
SUMMARY = {
    "num_batches": 4,
    "batch_size": 2,
    "eval_sequences": 8,
    "mean_deviation": 2.5,
    "rms_deviation": 2.7386,
    "theoretical_rms_deviation": 2.6,
    "trace_cov": 1.25,
}
PER_BATCH = [{"batch": k, "deviation": d, "loss": 1.0} for k, d in enumerate((1.0, 2.0, 3.0, 4.0))]
DRAWS = [{"draw": r, "trace_cov_pooled": 0.5 * r} for r in range(3)]


def _rows(path):
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_write_outputs_writes_every_table_and_the_figure(tmp_path):
    out = tmp_path / "variance"
    write_outputs(VarianceAnalysis(SUMMARY, PER_BATCH, DRAWS), out)
    assert json.loads((out / "variance.json").read_text()) == SUMMARY
    per_batch = _rows(out / "per_batch.csv")
    assert [float(r["deviation"]) for r in per_batch] == [1.0, 2.0, 3.0, 4.0]
    assert list(per_batch[0]) == ["batch", "deviation", "loss"]
    assert [float(r["trace_cov_pooled"]) for r in _rows(out / "draws.csv")] == [0.0, 0.5, 1.0]
    assert (out / "deviations.png").read_bytes()[:8] == PNG


def test_a_skipped_comparison_removes_an_old_draws_table(tmp_path):
    out = tmp_path / "variance"
    write_outputs(VarianceAnalysis(SUMMARY, PER_BATCH, DRAWS), out)
    summary = {**SUMMARY, "trace_cov": 2.0}
    write_outputs(VarianceAnalysis(summary, PER_BATCH, []), out)
    assert not (out / "draws.csv").exists()
    assert json.loads((out / "variance.json").read_text())["trace_cov"] == 2.0
    assert (out / "per_batch.csv").is_file()


def test_plot_deviations_writes_a_png_and_names_a_failed_write(tmp_path):
    path = tmp_path / "deviations.png"
    plot_deviations(PER_BATCH, SUMMARY, path)
    assert path.read_bytes()[:8] == PNG
    with pytest.raises(OSError, match="missing"):
        plot_deviations(PER_BATCH, SUMMARY, tmp_path / "missing" / "deviations.png")
