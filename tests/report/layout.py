"""Layout checks of the report page without a browser: sections, table widths, embedded images.

A table cannot be narrower than its min-content width: the sum over columns of
the widest unbreakable piece of each column (a word of a text cell, the whole
line of a right-aligned number cell, which does not wrap) plus padding and
borders. :func:`min_table_widths` estimates it from the HTML with a
conservative width per character (DejaVu Sans, Chromium's default on Debian,
is about 0.6 em a character), so a table that passes fits the page's content
width. ``scripts/render-report.py`` checks the real layout in Chromium.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

CHAR_EM = 0.62  # average advance of DejaVu Sans, conservative
BOLD_EM = 0.68
TABLE_FONT_PX = 13
SMALL_FONT_PX = 11
CELL_PAD_PX = 2 * 6 + 1  # padding and one border


class Tables(HTMLParser):
    """Cells of every table: per table, rows of (is_header, nowrap, [(text, font_px), ...])."""

    def __init__(self):
        super().__init__()
        self.tables: list[list[list[tuple[bool, bool, list[tuple[str, int]]]]]] = []
        self.ids: list[str] = []
        self.styles: list[str] = []
        self.images: list[str] = []
        self._cell = None
        self._small = 0
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        if "style" in a:
            self.styles.append(a["style"])
        if tag == "img":
            self.images.append(a.get("src", ""))
        if tag == "style":
            self._in_style = True
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            nowrap = "n" in (a.get("class") or "").split()
            self._cell = (tag == "th", nowrap, [["", TABLE_FONT_PX]])
            self.tables[-1][-1].append(self._cell)
        elif tag == "small" and self._cell:
            self._small += 1
            self._cell[2].append(["", SMALL_FONT_PX])
        elif tag == "br" and self._cell:
            self._cell[2].append(["", TABLE_FONT_PX])

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = None
        elif tag == "small" and self._cell:
            self._small -= 1
            self._cell[2].append(["", TABLE_FONT_PX])
        elif tag == "style":
            self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)
        if self._cell is not None:
            self._cell[2][-1][0] += data


def _piece_px(text: str, font: int, bold: bool, nowrap: bool) -> float:
    pieces = [text.strip()] if nowrap else re.split(r"[\s\u00ad]+", text)
    longest = max((len(p) for p in pieces), default=0)
    return longest * font * (BOLD_EM if bold else CHAR_EM)


def min_table_widths(page: str) -> list[tuple[int, float, int]]:
    """(table index, estimated min-content width in px, columns) of every table."""
    parser = Tables()
    parser.feed(page)
    out = []
    for index, rows in enumerate(parser.tables):
        columns: dict[int, float] = {}
        for row in rows:
            for col, (is_header, nowrap, lines) in enumerate(row):
                width = max(
                    (
                        _piece_px(t, f, is_header, nowrap and not is_header and f != SMALL_FONT_PX)
                        for t, f in lines
                    ),
                    default=0,
                )
                columns[col] = max(columns.get(col, 0.0), width + CELL_PAD_PX)
        out.append((index, sum(columns.values()), len(columns)))
    return out


def parse(page: str) -> Tables:
    parser = Tables()
    parser.feed(page)
    return parser


def body_rows(html: str, table: int = 0) -> list[list[str]]:
    """The text of each body row's cells in the ``table``-th table of ``html``."""
    rows = parse(html).tables[table]
    return [
        ["".join(text for text, _ in cell) for _, _, cell in row]
        for row in rows
        if not any(head for head, _, _ in row)
    ]
