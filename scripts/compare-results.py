"""Compare two results folders file by file, but for the fields that measure wall time.

A refactoring keeps an experiment's outputs bit-identical; this says whether it
did::

    python scripts/compare-results.py BEFORE AFTER [--ignore KEY ...]

BEFORE and AFTER are folders such as ``results/test`` of two checkouts that ran
the same configuration. Every file under either folder is compared: JSON and
JSON Lines as values, with the keys named by ``--ignore`` left out at any depth
(by default :data:`WALL_TIME_KEYS`, the fields that time this machine's work);
CSV as tables with those columns left out; every other file byte for byte.
Files under ``--skip`` patterns (by default :data:`SKIPPED`: checkpoints, whose
files also hold the round's wall time, logs, and adloco's output manifests,
which list each file's size, so a wall time's digits change them) are not compared. Prints one
line per file that differs or exists on one side only, then a count; exits 1
when anything differs.

A report shows the calibration's measured pass times, which differ between two
runs of the same code: compare a report by building it twice from the same
results folder (``adloco report`` with ``--out`` elsewhere), not across runs.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import io
import json
import sys
from pathlib import Path
from typing import Any

# Fields whose value is a wall-clock measurement of this run, not a result.
WALL_TIME_KEYS = (
    "wall_time_s",
    "step_time_measured",
    "fwd_bwd_repeats_s",
    "update_repeats_s",
    "train_seconds",
)
# Files that hold wall times inside binary state, or nothing but logs.
SKIPPED = ("checkpoints/*", "*.log", "*.adloco-output.json")


def without(value: Any, ignored: frozenset[str]) -> Any:
    """``value`` with every mapping key in ``ignored`` removed, at any depth."""
    if isinstance(value, dict):
        return {k: without(v, ignored) for k, v in value.items() if k not in ignored}
    if isinstance(value, list):
        return [without(v, ignored) for v in value]
    return value


def parsed(path: Path, ignored: frozenset[str]) -> Any:
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [without(json.loads(line), ignored) for line in text.splitlines() if line]
    return without(json.loads(text), ignored)


def table(path: Path, ignored: frozenset[str]) -> list[dict]:
    rows = csv.DictReader(io.StringIO(path.read_text()))
    return [{k: v for k, v in row.items() if k not in ignored} for row in rows]


def same(a: Path, b: Path, ignored: frozenset[str]) -> bool:
    if a.suffix == ".csv":
        return table(a, ignored) == table(b, ignored)
    if a.suffix in (".json", ".jsonl"):
        try:
            return parsed(a, ignored) == parsed(b, ignored)
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass
    return a.read_bytes() == b.read_bytes()


def files(root: Path, skipped: tuple[str, ...]) -> set[str]:
    names = (p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    return {n for n in names if not any(fnmatch.fnmatch(n, pattern) for pattern in skipped)}


def compare(
    before: Path, after: Path, ignored: frozenset[str], skipped: tuple[str, ...] = SKIPPED
) -> list[str]:
    """One line per difference between the two folders."""
    left, right = files(before, skipped), files(after, skipped)
    lines = [f"only in {before}: {name}" for name in sorted(left - right)]
    lines += [f"only in {after}: {name}" for name in sorted(right - left)]
    lines += [
        f"differs: {name}"
        for name in sorted(left & right)
        if not same(before / name, after / name, ignored)
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument(
        "--ignore",
        action="append",
        default=None,
        help=f"keys to leave out (default: {WALL_TIME_KEYS})",
    )
    parser.add_argument(
        "--skip", action="append", default=None, help=f"file patterns to leave out ({SKIPPED})"
    )
    args = parser.parse_args(argv)
    ignored = frozenset(args.ignore if args.ignore is not None else WALL_TIME_KEYS)
    skipped = tuple(args.skip if args.skip is not None else SKIPPED)
    lines = compare(args.before, args.after, ignored, skipped)
    for line in lines:
        print(line)
    total = len(files(args.before, skipped) | files(args.after, skipped))
    print(f"{total - len(lines)} of {total} files equal ({len(lines)} differ)")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
