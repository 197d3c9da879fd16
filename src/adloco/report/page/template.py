"""The page's templates: HTML files in ``report/templates/`` filled by :class:`string.Template`.

Part of ``adloco report``'s page: the Python side (:mod:`adloco.report.page.render`
and the ``html_*`` modules) computes the numbers and the escaped HTML pieces;
a template holds the page's structure, its sections, headings and fixed
prose. A template is written for people, indented and wrapped; :func:`load`
compacts it into the single line of HTML the page is made of:

- a line whose text starts with ``##`` is a comment and is dropped;
- every line loses its indentation and its line break;
- two lines are joined by one space where both sides are prose, else
  directly: a line ending with ``>``, a line starting with ``<`` and a line
  holding one field alone (a block of HTML, such as a section) join directly.

So wrapped prose keeps its spaces, and a break beside a tag or a block adds
nothing. A break between prose and an inline tag (``<code>``, ``<a>``...) is
refused: whether a space belongs there cannot be told, so such prose is
wrapped between two words instead. ``$name`` is a field (``$$`` a dollar
sign); :func:`render` refuses a field the template lacks or one left unfilled,
so a renamed field fails in the tests instead of on the page. A style sheet
(``templates/*.css``, :func:`stylesheet`) is inlined as written, not compacted.
"""

from __future__ import annotations

import functools
import re
import string
from importlib import resources

TEMPLATE_DIR = "templates"  # folder of the templates inside the adloco.report.page package
INLINE = re.compile(r"</?(a|b|br|code|small|span)\b")  # tags that sit inside prose
BLOCK = re.compile(r"\$(\w+|\{\w+\})")  # a line holding only this is a block of HTML


def compact(text: str) -> str:
    """A template's text as one line of HTML, by the rules of this module's docstring."""
    out, prose_before, inline_end = "", False, False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("##"):
            continue
        block = BLOCK.fullmatch(line) is not None
        prose_after = not block and not line.startswith("<")
        if (prose_before and INLINE.match(line)) or (inline_end and prose_after):
            raise ValueError(f"a line break between prose and an inline tag, before {line!r}")
        out += (" " if prose_before and prose_after else "") + line
        prose_before = not block and not line.endswith(">")
        inline_end = line.endswith(">") and INLINE.match(line[line.rfind("<") :]) is not None
    return out


def _read(filename: str) -> str:
    """The text of ``templates/<filename>``; a missing one says to reinstall."""
    path = resources.files("adloco.report.page").joinpath(TEMPLATE_DIR, filename)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        kind = "*" + filename[filename.rfind(".") :]
        raise FileNotFoundError(
            f"page template {filename} not found, {path}, reinstall adloco: its package "
            f"ships adloco/report/page/templates/{kind} (pyproject.toml: package-data)"
        ) from None


@functools.cache
def load(name: str) -> string.Template:
    """The template ``templates/<name>.html``, compacted; read once per process."""
    return string.Template(compact(_read(f"{name}.html")))


@functools.cache
def stylesheet(name: str, **fields: str) -> str:
    """The style sheet ``templates/<name>.css`` as written, its ``$fields`` filled."""
    return string.Template(_read(f"{name}.css")).substitute(fields)


def render(name: str, **fields: str) -> str:
    """Template ``name`` with its ``$fields`` filled; every field given and every one used."""
    template = load(name)
    wanted = set(template.get_identifiers())
    if wanted != set(fields):
        missing = sorted(wanted - set(fields))
        unused = sorted(set(fields) - wanted)
        raise KeyError(f"template {name}.html: fields missing {missing}, not in it {unused}")
    return template.substitute(fields)
