"""The report's CSV tables: one header row, then a row per record, as every table is written.

A missing or NaN value is an empty cell and a float its ``repr`` (every digit
back when read), so a table read again gives the numbers the report computed.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from adloco.core.io import write_text_atomic


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_csv(path: Path, columns: list[str] | tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(k)) for k in columns])
    write_text_atomic(path, buffer.getvalue())
