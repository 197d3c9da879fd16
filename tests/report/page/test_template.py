"""The page's templates: compaction by hand-worked cases, fields checked, escaping, every
template shipped."""

from __future__ import annotations

import re
from fnmatch import fnmatch
from pathlib import Path

import pytest
from markupsafe import Markup

from adloco.core.errors import describe
from adloco.report.page import template
from adloco.report.page.parts import CSS, PAGE_WIDTH_PX
from adloco.report.page.run_sections import PER_RUN_FIGURES
from adloco.report.page.template import FILES, compact, macros, render

ROOT = Path(__file__).resolve().parents[3]
REPORT = ROOT / "src" / "adloco" / "report"
TEMPLATES = sorted((REPORT / "page" / "templates").glob("*.html"))
STYLESHEETS = sorted((REPORT / "page" / "templates").glob("*.css"))
# Every macro: name -> (its arguments, its body compacted).
MACROS = {
    name: found
    for path in TEMPLATES
    for name, found in macros(path.read_text(encoding="utf-8")).items()
}


def test_compact_joins_prose_with_a_space_and_tags_and_blocks_directly():
    text = """
    ## a comment, dropped
    <h2 id='x'>Title</h2>
    <p class='note'>wrapped
      prose, then <code>code</code> and
      more</p>
    {{ section }}
    {{ other }}
    <p>tail {{ value }}
      ends.</p>
    """
    assert compact(text) == (
        "<h2 id='x'>Title</h2><p class='note'>wrapped prose, then <code>code</code> and more</p>"
        "{{ section }}{{ other }}<p>tail {{ value }} ends.</p>"
    )


def test_a_file_is_macros_each_compacted_and_nothing_else():
    text = """
    ## a comment, dropped
    {% macro one(a, b) %}
    ## its own comment
    <p>{{ a }}
      and {{ b }}</p>
    {% endmacro %}

    {% macro two() %}
    <br>
    {% endmacro %}
    """
    assert macros(text) == {"one": ("a, b", "<p>{{ a }} and {{ b }}</p>"), "two": ("", "<br>")}
    with pytest.raises(ValueError, match="outside a macro, only comments"):
        macros("<p>stray</p>")
    with pytest.raises(ValueError, match="macro one: no"):
        macros("{% macro one() %}\n<p>x</p>")


def test_every_field_is_escaped_unless_it_is_markup():
    # A run name or a path reaches the page escaped; a piece of HTML built from escaped parts
    # (Markup) is kept as it is.
    got = render("method", version="<1>", config_path='a&b\'s "c"', roles=Markup("<b>r</b>"))
    assert "adloco &lt;1&gt;, configuration a&amp;b&#39;s &#34;c&#34;. Roles: <b>r</b>." in got
    assert isinstance(got, Markup)


def test_method_template_gives_the_page_text_written_out_by_hand():
    got = render("method", version="0.1.0", config_path="config/test.yaml", roles="AdLoCo a")
    assert got == (
        "<h2 id='method'>How this page is made</h2><p class='note'>adloco 0.1.0, configuration "
        "config/test.yaml. Roles: AdLoCo a. docs/report.md states how every table and figure is "
        "computed; <code>adloco report</code> rebuilds this page from the results, "
        "<code>scripts/render-report.py</code> renders it to PNG.</p>"
    )


def test_render_refuses_a_missing_or_an_unknown_field():
    with pytest.raises(KeyError, match=r"missing \['roles'\], not in it \[\]"):
        render("method", version="1", config_path="c")
    with pytest.raises(KeyError, match=r"missing \[\], not in it \['typo'\]"):
        render("method", version="1", config_path="c", roles="r", typo="t")


def _used(stem: str, callers: str) -> bool:
    """Whether the code renders template ``stem``: by name, or as figure(png, "<name>", ...)."""
    if re.search(rf"render\(\s*\"{stem}\"", callers):
        return True
    name = stem.removeprefix("figure_")
    if name == stem:
        return False
    by_call = re.search(rf"figure\(\s*[\w.]+(\(\"\w+\"\))?,\s*\"{name}\"", callers)
    return by_call is not None or name in PER_RUN_FIGURES


def test_every_file_is_read_and_no_macro_is_in_two():
    assert sorted(f"{stem}.html" for stem in FILES) == [p.name for p in TEMPLATES]
    held = [name for path in TEMPLATES for name in macros(path.read_text(encoding="utf-8"))]
    assert len(held) == len(set(held)) == len(MACROS)


@pytest.mark.parametrize("name", sorted(MACROS))
def test_every_macro_is_one_line_and_used_by_the_page(name):
    assert "\n" not in MACROS[name][1]
    callers = "".join(p.read_text(encoding="utf-8") for p in (REPORT / "page").glob("*.py"))
    assert _used(name, callers), f"{name} is never rendered"


@pytest.mark.parametrize("name", sorted(n for n in MACROS if n.startswith("figure_")))
def test_every_figure_template_is_an_image_with_alt_text_and_a_caption(name):
    arguments, text = MACROS[name]
    match = re.fullmatch(
        r"<figure><img alt='([^'<>&\"]+)' src='data:image/png;base64,\{\{ png \}\}'>"
        r"<figcaption>([^<>]+)</figcaption></figure>",
        text,
    )
    assert match, text
    assert set(arguments.split(", ")) <= {"png", "anchor"}


def test_the_style_sheet_is_inlined_as_written_with_the_page_width():
    (sheet,) = STYLESHEETS
    written = sheet.read_text(encoding="utf-8")
    assert written.count("{{ page_width_px }}") == 1
    assert CSS == "\n" + written.replace("{{ page_width_px }}", str(PAGE_WIDTH_PX))
    assert f"max-width: {PAGE_WIDTH_PX}px;\n       margin: 1.5em auto;" in CSS


def test_the_package_data_ships_every_template():
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = meta["tool"]["setuptools"]["package-data"]["adloco"]
    assert TEMPLATES and STYLESHEETS
    for path in TEMPLATES + STYLESHEETS:
        inside = path.relative_to(ROOT / "src" / "adloco").as_posix()
        assert any(fnmatch(inside, pattern) for pattern in patterns), inside


@pytest.mark.reliability("install")
def test_a_missing_template_is_one_line_saying_to_reinstall(monkeypatch):
    monkeypatch.setattr(template, "TEMPLATE_DIR", "no-such-folder")
    template.forget()
    try:
        with pytest.raises(FileNotFoundError) as caught:
            render("method", version="1", config_path="c", roles="r")
    finally:
        template.forget()
    message = describe(caught.value)
    assert message.startswith("page template page.html not found, ")
    assert message.endswith(
        "reinstall adloco: its package ships "
        "adloco/report/page/templates/*.html (pyproject.toml: package-data)"
    )
    assert "\n" not in message


@pytest.mark.parametrize(
    "text",
    ["<p>prose\n<code>x</code> more</p>", "<p>prose <code>x</code>\nmore</p>", "<p>a\n<br>b</p>"],
    ids=["tag-after-prose", "prose-after-tag", "br-after-prose"],
)
def test_compact_refuses_a_break_between_prose_and_an_inline_tag(text):
    with pytest.raises(ValueError, match="a line break between prose and an inline tag"):
        compact(text)
