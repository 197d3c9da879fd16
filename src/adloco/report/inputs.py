"""Read what the report is built from: runs, calibration and variance results.

The report is the last stage of the pipeline. It reads every configured run
for each of its seeds (:func:`adloco.config.run_seeds`;
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
from pathlib import Path
from typing import Any

from adloco.calibration_record import CalibrationRecord
from adloco.config import RunSettings, resolve_run, run_seeds
from adloco.io import read_json_object
from adloco.paths import device_calibration_file
from adloco.records import (
    REQUIRED_ROW_KEYS,
    SUMMARY_KEYS,
    derive_summary,
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


def load_run_seed(
    runs_dir: Path, config: dict, run: str, seed: int, settings: RunSettings | None = None
) -> RunSeed:
    """Read one run and seed; check it is the run the configuration describes."""
    settings = settings if settings is not None else resolve_run(config, run)
    folder = runs_dir / run / f"seed{seed}"
    metrics_path = folder / "metrics.jsonl"
    rows = read_metrics(metrics_path)
    _identity(rows, "run", run, metrics_path)
    _identity(rows, "seed", seed, metrics_path)
    _identity(rows, "method", settings.method, metrics_path)

    summary_path = folder / "summary.json"
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


def load_runs(runs_dir: Path, config: dict) -> list[RunSeed]:
    """Every configured run for each of its seeds, in configuration order."""
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"{runs_dir}: runs folder not found")
    seeds = {run: run_seeds(config, run) for run in config["runs"]}
    missing = [
        runs_dir / run / f"seed{seed}" / "metrics.jsonl"
        for run in config["runs"]
        for seed in seeds[run]
        if not (runs_dir / run / f"seed{seed}" / "metrics.jsonl").is_file()
    ]
    if missing:
        listed = "\n  ".join(str(p) for p in missing)
        raise FileNotFoundError(f"runs missing (train them first):\n  {listed}")
    settings = {run: resolve_run(config, run) for run in config["runs"]}
    return [
        load_run_seed(runs_dir, config, run, seed, settings[run])
        for run in config["runs"]
        for seed in seeds[run]
    ]


def load_calibration(cal_dir: Path, config: dict) -> list[Calibration]:
    """One entry per configured device; a device with a fixed max_batch needs no file."""
    out = []
    for device in config["cluster"]["devices"]:
        name = device["name"]
        path = device_calibration_file(cal_dir, name)
        if device.get("max_batch") is None:
            record = CalibrationRecord.read(path, name, f"{path}: calibration not found")
            out.append(Calibration(name, "file", dict(record.fields), path))
        else:
            # Training uses the configured value, so that is what the report shows.
            out.append(
                Calibration(
                    name,
                    "config",
                    {"device": name, "kind": device.get("kind"), "max_batch": device["max_batch"]},
                    None,
                )
            )
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
    summary = read_json_object(
        var_dir / "variance.json", f"{var_dir / 'variance.json'}: variance results not found"
    )
    notes = []
    per_batch = None
    csv_path = var_dir / "per_batch.csv"
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
    png = var_dir / "deviations.png"
    if not png.is_file():
        notes.append(f"{png.name} not found: no deviation histogram")
    return Variance(var_dir, summary, per_batch, png if png.is_file() else None, notes)
