"""A generated block between two marker lines of a text file, replaced in place.

Used by ``scripts/readme-results.py`` and ``scripts/calibration-figures.py``,
which write figures into the README and the docs from a run's own files.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def replace_block(text: str, new: str, begin: str, end: str, path: Path | None = None) -> str:
    """``text`` with the lines from ``begin`` to ``end`` (both included) replaced by ``new``."""
    for marker in (begin, end):
        if text.count(marker) != 1:
            where = f"{path}: " if path is not None else ""
            raise ValueError(
                f"{where}holds {text.count(marker)} {marker} lines, where the generated block "
                f"needs exactly one {begin} and one {end} (nothing was written); put the two "
                "marker lines where the block goes, or give the right file"
            )
    start, stop = text.index(begin), text.index(end) + len(end) + 1
    return text[:start] + new + text[stop:]


def write_or_check(
    path: Path, new_block: str, begin: str, end: str, source: Path, check: bool
) -> int:
    """Write ``new_block`` into ``path``; with ``check``, exit status 1 when it differs instead.

    ``path`` may be a link: the file it names is written (in place of the file,
    atomically), and the link stays a link. Raises ``OSError`` or ``ValueError``
    with a one-line message before anything is written.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found (or not a file); give the file to update")
    text = path.read_text()
    updated = replace_block(text, new_block, begin, end, path)
    if check:
        if updated != text:
            print(f"{path}: its generated block is not {source}'s", file=sys.stderr)
            return 1
        return 0
    real = Path(os.path.realpath(path))  # a link's file, written in its own folder
    tmp = real.with_name(f".{real.name}.tmp")
    tmp.write_text(updated)
    shutil.copymode(real, tmp)
    tmp.replace(real)
    return 0
