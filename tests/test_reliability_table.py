"""docs/reliability.md's table counts the cases `pytest -m reliability` runs.

The suite is collected in a child process (``--collect-only``, which
tests/conftest.py makes print the cases by kind); each kind's count must be the
table's, every kind of the suite a row and every row a kind, and the run the
page quotes must list the same counts with their sum.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reliability.md"
COLLECTED = "reliability cases collected: "
PASSED = "reliability cases passed: "


def table_counts(text: str) -> dict[str, int]:
    """Each row's kind and count (``| kind | cases | ...``), the header aside."""
    return {
        kind: int(count)
        for kind, count in re.findall(r"^\| ([a-z][a-z -]*?) \| (\d+) \|", text, flags=re.M)
    }


def listed(line: str, prefix: str) -> dict[str, str]:
    """``kind count`` pairs of a summary line, after ``prefix``."""
    pairs = line.removeprefix(prefix).split(", ")
    return dict(pair.rsplit(" ", 1) for pair in pairs)


def test_table_rows_are_read_as_kind_and_count():
    text = "| kind | cases | what |\n| --- | --- | --- |\n| live curves | 10 | x |\n| dvc | 15 |\n"
    assert table_counts(text) == {"live curves": 10, "dvc": 15}
    assert listed(PASSED + "dvc 15/15, live curves 10/10", PASSED) == {
        "dvc": "15/15",
        "live curves": "10/10",
    }


@pytest.mark.heavy
def test_the_table_counts_the_cases_the_suite_collects():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "reliability",
         "-p", "no:cacheprovider", "-p", "no:xdist"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(COLLECTED)]
    assert len(lines) == 1, done.stdout[-2000:]
    collected = {kind: int(count) for kind, count in listed(lines[0], COLLECTED).items()}
    text = PAGE.read_text()
    assert table_counts(text) == collected
    # The run the page quotes: every kind with all its cases passed, and their sum.
    quoted = [line for line in text.splitlines() if line.startswith(PASSED)]
    assert len(quoted) == 1
    assert listed(quoted[0], PASSED) == {kind: f"{n}/{n}" for kind, n in collected.items()}
    assert f"{sum(collected.values())} cases:" in text
