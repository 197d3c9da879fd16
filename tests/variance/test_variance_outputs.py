"""Tests of adloco.variance.outputs: the folder's files and the histogram."""

from __future__ import annotations

import csv
import json

import pytest

from adloco.algo.estimators import VarianceEstimate
from adloco.core.io import OWNED_LIST
from adloco.variance import VarianceAnalysis, plot_deviations, write_outputs
from adloco.variance.outputs import DRAW_COLUMNS
from adloco.variance.reductions import draw_row

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


def test_a_skipped_comparison_leaves_a_draws_table_of_its_header_alone(tmp_path):
    # The folder holds the same files whatever the settings (dvc.yaml declares
    # each of them); an old table's draws are gone.
    out = tmp_path / "variance"
    write_outputs(VarianceAnalysis(SUMMARY, PER_BATCH, DRAWS), out)
    summary = {**SUMMARY, "trace_cov": 2.0}
    write_outputs(VarianceAnalysis(summary, PER_BATCH, []), out)
    assert (out / "draws.csv").read_text().splitlines() == [",".join(DRAW_COLUMNS)]
    assert json.loads((out / "variance.json").read_text())["trace_cov"] == 2.0
    assert (out / "per_batch.csv").is_file()
    listed = json.loads((out / OWNED_LIST).read_text())["files"]
    assert sorted(listed) == sorted(p.name for p in out.iterdir() if p.name != OWNED_LIST)


def test_the_draws_header_is_the_columns_of_a_draw_row():
    est = VarianceEstimate(2.0, 1.0, 1.5, None, None, groups=4, samples=8, dof=3)
    row = draw_row(7, est, est, eta=0.8)
    assert tuple(row) == DRAW_COLUMNS
    assert row["norm_test_batch_scalars"] == pytest.approx(2.0 / (0.8**2 * 1.5))
    assert DRAW_COLUMNS[:3] == ("draw", "trace_cov_pooled", "grad_sqnorm_pooled")
    assert len(DRAW_COLUMNS) == 1 + 2 * 4


def test_plot_deviations_writes_a_png_and_names_a_failed_write(tmp_path):
    path = tmp_path / "deviations.png"
    plot_deviations(PER_BATCH, SUMMARY, path)
    assert path.read_bytes()[:8] == PNG
    with pytest.raises(OSError, match="missing"):
        plot_deviations(PER_BATCH, SUMMARY, tmp_path / "missing" / "deviations.png")
