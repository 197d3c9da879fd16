"""A generated block between two marker lines of a text file, replaced in place.

Used by ``scripts/readme-results.py`` and ``scripts/calibration-figures.py``,
which write figures into the README and the docs from a run's own files.
"""

from __future__ import annotations

import sys
from pathlib import Path


def replace_block(text: str, new: str, begin: str, end: str) -> str:
    """``text`` with the lines from ``begin`` to ``end`` (both included) replaced by ``new``."""
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"the file needs exactly one {begin} and one {end}")
    start, stop = text.index(begin), text.index(end) + len(end) + 1
    return text[:start] + new + text[stop:]


def write_or_check(
    path: Path, new_block: str, begin: str, end: str, source: Path, check: bool
) -> int:
    """Write ``new_block`` into ``path``; with ``check``, exit status 1 when it differs instead."""
    text = path.read_text()
    updated = replace_block(text, new_block, begin, end)
    if check:
        if updated != text:
            print(f"{path}: its generated block is not {source}'s", file=sys.stderr)
            return 1
        return 0
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(updated)
    tmp.replace(path)
    return 0
