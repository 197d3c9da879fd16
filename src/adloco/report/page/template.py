"""The page's templates: Jinja2 macros in ``page/templates/*.html``, autoescaped.

Part of ``adloco report``'s page: the Python side (:mod:`adloco.report.page.render`
and the other ``page`` modules) computes the numbers and the pieces of HTML;
a template holds the page's structure, its sections, headings and fixed
prose. Each file holds the macros of one part of the page (``page.html`` the
page itself, ``figures.html`` every figure's alt text and caption,
``parts.html`` the pieces every section uses, one file per section module),
and :func:`render` calls one by name. Autoescaping is on: every argument is
escaped unless it is :class:`markupsafe.Markup`, HTML built from escaped
parts (a macro's output, or ``Markup(...).format(...)``, which escapes its
arguments), so a run name, a path or a configuration string reaches the page
escaped by construction.

A macro is written for people, indented and wrapped; the loader
(:class:`CompactLoader`) compacts its body into the single line of HTML the
page is made of, before Jinja2 compiles it:

- a line whose text starts with ``##`` is a comment and is dropped;
- every line loses its indentation and its line break;
- two lines are joined by one space where both sides are prose, else
  directly: a line ending with ``>``, a line starting with ``<`` and a line
  holding one field alone (``{{ name }}``: a block of HTML, such as a
  section) join directly.

So wrapped prose keeps its spaces, and a break beside a tag or a block adds
nothing. A break between prose and an inline tag (``<code>``, ``<a>``...) is
refused: whether a space belongs there cannot be told, so such prose is
wrapped between two words instead. Outside a macro a file holds only
comments and blank lines. :func:`render` refuses a field the macro lacks or
one left unfilled, so a renamed field fails in the tests instead of on the
page. A style sheet (``templates/*.css``, :func:`stylesheet`) is inlined as
written, not compacted.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

import jinja2
from markupsafe import Markup

TEMPLATE_DIR = "templates"  # folder of the templates inside the adloco.report.page package
# The files of macros, the page's first: a missing install fails on it.
FILES = (
    "page", "parts", "figures", "first", "verdicts", "evidence", "regimes", "runs", "inputs",
    "workers",
)  # fmt: skip
INLINE = re.compile(r"</?(a|b|br|code|small|span)\b")  # tags that sit inside prose
BLOCK = re.compile(r"\{\{ \w+ \}\}")  # a line holding only this is a block of HTML
MACRO = re.compile(r"\{% macro (\w+)\(([\w, ]*)\) %\}")  # a macro's first line
END = "{% endmacro %}"  # its last


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


def macros(text: str) -> dict[str, tuple[str, str]]:
    """A file's macros: name -> (arguments, body compacted to one line)."""
    found: dict[str, tuple[str, str]] = {}
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("##"):
            continue
        head = MACRO.fullmatch(line)
        if head is None:
            raise ValueError(f"outside a macro, only comments and blank lines: {line!r}")
        body = []
        for inner in lines:
            if inner.strip() == END:
                break
            body.append(inner)
        else:
            raise ValueError(f"macro {head.group(1)}: no {END}")
        found[head.group(1)] = (head.group(2), compact("\n".join(body)))
    return found


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


class CompactLoader(jinja2.BaseLoader):
    """The package's templates, each macro's body compacted to one line before compiling."""

    def get_source(self, environment: jinja2.Environment, template: str):
        text = _read(template)
        if template.endswith(".html"):
            text = "".join(
                f"{{% macro {name}({arguments}) %}}{body}{END}"
                for name, (arguments, body) in macros(text).items()
            )
        return text, None, lambda: True


ENVIRONMENT = jinja2.Environment(
    loader=CompactLoader(),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,  # a style sheet is inlined as written
    cache_size=0,  # each file is compiled once, by _module
)


@functools.cache
def _module(filename: str):
    return ENVIRONMENT.get_template(filename).module


@functools.cache
def _holders() -> dict[str, str]:
    """Each macro's file, ``name -> <file>.html``; two macros of one name are refused."""
    holders: dict[str, str] = {}
    for stem in FILES:
        for name in macros(_read(f"{stem}.html")):
            if name in holders:
                raise ValueError(f"macro {name} is in both {holders[name]} and {stem}.html")
            holders[name] = f"{stem}.html"
    return holders


@functools.cache
def load(name: str) -> jinja2.runtime.Macro:
    """The macro ``name``, from the file that holds it; each file compiled once per process."""
    holders = _holders()
    if name not in holders:
        raise KeyError(f"no page template {name} in {', '.join(f'{s}.html' for s in FILES)}")
    return getattr(_module(holders[name]), name)


def forget() -> None:
    """Read the templates again on the next use (after the template folder changed)."""
    for cached in (load, _holders, _module):
        cached.cache_clear()


@functools.cache
def stylesheet(name: str, **fields: str) -> Markup:
    """The style sheet ``templates/<name>.css`` as written, its ``{{ fields }}`` filled.

    Markup: the file is the package's own and each field is escaped.
    """
    return Markup(ENVIRONMENT.get_template(f"{name}.css").render(**fields))


def render(name: str, **fields: object) -> Markup:
    """Macro ``name`` with its fields filled; every field given and every one used."""
    macro = load(name)
    wanted = set(macro.arguments)
    if wanted != set(fields):
        missing = sorted(wanted - set(fields))
        unused = sorted(set(fields) - wanted)
        raise KeyError(f"template {name}: fields missing {missing}, not in it {unused}")
    return macro(**fields)
