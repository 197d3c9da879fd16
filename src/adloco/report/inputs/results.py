"""Read what the report is built from: runs, calibration and variance results.

The report is the last stage of the pipeline. It reads every configured run
for each of its seeds (:meth:`adloco.config.Config.run_seeds`;
``results/<experiment>/runs/<run>/seed<seed>/metrics.jsonl`` and ``summary.json``), the
calibration file of every configured device and the variance stage's folder, as
documented in docs/DESIGN.md ("Run outputs"). A missing or malformed required
file raises FileNotFoundError or ValueError naming the file; optional fields
and files are shown when present and skipped when absent.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from adloco.config import ClusterConfig, Config, RunSettings
from adloco.core.io import read_json_object
from adloco.core.paths import (
    device_calibration_file,
    metrics_file,
    run_summary_file,
    seed_dir,
    variance_deviations_file,
    variance_per_batch_file,
    variance_summary_file,
)
from adloco.formats.calibration import CalibrationRecord
from adloco.formats.clock import RunClock
from adloco.formats.metrics import (
    REQUIRED_ROW_KEYS,
    SUMMARY_KEYS,
    derive_summary,
    fill_messages,
    is_number,
)


@dataclass
class RunSeed:
    """One trained run for one seed: its metrics rows and its summary."""

    run: str
    seed: int
    method: str
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    folder: Path
    settings: RunSettings

    @cached_property
    def clock(self) -> RunClock:
        """Its rows read for the clock once, for every recomputation of its time."""
        return RunClock(self.rows)


@dataclass
class Variance:
    """The variance stage's outputs; only ``summary`` is required."""

    folder: Path
    summary: dict[str, Any]
    per_batch: list[dict[str, Any]] | None
    deviations_png: Path | None
    notes: list[str] = field(default_factory=list)


@dataclass
class Calibration:
    """Max batch of one configured device: from its calibration file or the config."""

    device: str
    source: str  # "file" or "config"
    fields: dict[str, Any]
    path: Path | None


def read_json_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of each non-empty line; invalid JSON names the file and line."""
    out = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not valid JSON: {exc}") from exc
    return out


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Parse metrics.jsonl; every line must be a JSON object with the required keys."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: metrics file not found (has this run been trained?)")
    rows = []
    for number, row in read_json_lines(path):
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object per line")
        for key in REQUIRED_ROW_KEYS:
            if key not in row:
                raise ValueError(f"{path}:{number}: missing key {key!r}")
            if not is_number(row[key]):
                raise ValueError(f"{path}:{number}: key {key!r} must be a number, got {row[key]!r}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no metrics rows")
    return rows


def _identity(rows: list[dict], key: str, expected: Any, path: Path) -> None:
    seen = {r[key] for r in rows if key in r}
    if seen and seen != {expected}:
        raise ValueError(
            f"{path}: rows name {key} {sorted(map(str, seen))}, expected {expected!r} "
            "(results from another configuration?)"
        )


def load_run_seed(runs_dir: Path, run: str, seed: int, settings: RunSettings) -> RunSeed:
    """Read one run and seed; check it is the run the configuration describes."""
    folder = seed_dir(runs_dir, run, seed)
    metrics_path = metrics_file(folder)
    rows = fill_messages(read_metrics(metrics_path))
    _identity(rows, "run", run, metrics_path)
    _identity(rows, "seed", seed, metrics_path)
    _identity(rows, "method", settings.method, metrics_path)

    summary_path = run_summary_file(folder)
    written = read_json_object(
        summary_path,
        f"{summary_path}: summary not found (the run has not finished, or was interrupted)",
    )
    derived = derive_summary(rows)
    if is_number(written.get("rounds")) and written["rounds"] != derived["rounds"]:
        raise ValueError(
            f"{summary_path}: says {written['rounds']} rounds but {metrics_path} ends at round "
            f"{derived['rounds']} (a truncated or stale metrics file?)"
        )
    if "method" in written and written["method"] != settings.method:
        raise ValueError(
            f"{summary_path}: method {written['method']!r}, the configuration says "
            f"{settings.method!r} for run {run}"
        )
    # The engine's own summary wins; metrics fill what it leaves out.
    summary = dict(derived)
    for key in SUMMARY_KEYS:
        if key in written and written[key] is not None:
            summary[key] = written[key]
    return RunSeed(run, seed, settings.method, rows, summary, folder, settings)


def load_runs(runs_dir: Path, config: Config) -> list[RunSeed]:
    """Every configured run for each of its seeds, in configuration order."""
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"{runs_dir}: runs folder not found")
    wanted = [(run, seed) for run in config.runs for seed in config.run_seeds(run)]
    missing = [
        metrics_file(seed_dir(runs_dir, run, seed))
        for run, seed in wanted
        if not metrics_file(seed_dir(runs_dir, run, seed)).is_file()
    ]
    if missing:
        listed = "\n  ".join(str(p) for p in missing)
        raise FileNotFoundError(f"runs missing (train them first):\n  {listed}")
    return [load_run_seed(runs_dir, run, seed, config.run(run)) for run, seed in wanted]


def load_calibration(cal_dir: Path, cluster: ClusterConfig) -> list[Calibration]:
    """One entry per configured device; a device with a fixed max_batch needs no file."""
    out = []
    for device in cluster.devices:
        path = device_calibration_file(cal_dir, device.name)
        if device.max_batch is None:
            record = CalibrationRecord.read(path, device.name, f"{path}: calibration not found")
            out.append(Calibration(device.name, "file", dict(record.fields), path))
        else:
            # Training uses the configured value, so that is what the report shows.
            fields = {"device": device.name, "kind": device.kind, "max_batch": device.max_batch}
            out.append(Calibration(device.name, "config", fields, None))
    return out


def _parse_cell(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_variance(var_dir: Path) -> Variance:
    """variance.json is required; per_batch.csv and deviations.png are shown when present."""
    if not var_dir.is_dir():
        raise FileNotFoundError(f"{var_dir}: variance folder not found (run `adloco variance`)")
    summary_path = variance_summary_file(var_dir)
    summary = read_json_object(summary_path, f"{summary_path}: variance results not found")
    notes = []
    per_batch = None
    csv_path = variance_per_batch_file(var_dir)
    if csv_path.is_file():
        with csv_path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames:
                raise ValueError(f"{csv_path}: no header row")
            per_batch = [
                {k: _parse_cell(v) for k, v in row.items() if k is not None and v not in (None, "")}
                for row in reader
            ]
    else:
        notes.append(f"{csv_path.name} not found: no per-batch table")
    png = variance_deviations_file(var_dir)
    if not png.is_file():
        notes.append(f"{png.name} not found: no deviation histogram")
    return Variance(var_dir, summary, per_batch, png if png.is_file() else None, notes)
