"""Code metrics: raw configuration lookups, long functions, long modules.

Reads the Python files under a package folder (``src/adloco`` by default) with
:mod:`ast` and prints three measures, so a clean-up can state them before and
after::

    python scripts/code_metrics.py [PACKAGE_DIR] [--list]

*Raw configuration lookups.* A *configuration expression* is a name, or an
attribute's last name (``self.cfg``), that is one of :data:`CONFIG_NAMES` or
ends in ``_cfg`` or ``_config``; and, recursively, a lookup on a configuration
expression (``cfg["cluster"]`` or ``cfg.get("cluster")``). A *lookup* is a
subscript whose index is a string constant, or a call of ``.get`` whose first
argument is a string constant, on a configuration expression. Every such node
counts once: ``cfg["cluster"]["devices"]`` is two lookups, and one *chain*
(a lookup that is not itself the base of another lookup). Lookups on other
names (a loop variable ``d`` over the devices, a JSON record) are not counted.

*Long functions.* A function or method (``def`` or ``async def``, nested ones
too) whose span from its ``def`` line to its last line is 60 lines or more.

*Long modules.* A file of more than 500 lines.

``--list`` prints every lookup with its file and line as well.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

CONFIG_NAMES = frozenset(
    {
        "cfg",
        "config",
        "cluster",
        "cal",
        "network",
        "device",
        "dev",
        "model",
        "train",
        "report",
        "section",
    }
)
LONG_FUNCTION_LINES = 60
LONG_MODULE_LINES = 500


def is_config_name(name: str) -> bool:
    return name in CONFIG_NAMES or name.endswith(("_cfg", "_config"))


def string_key(node: ast.AST) -> str | None:
    """The string constant of a lookup on a configuration expression, else None."""
    if isinstance(node, ast.Subscript) and is_config_expr(node.value):
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and is_config_expr(node.func.value)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


def is_config_expr(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return is_config_name(node.id)
    if isinstance(node, ast.Attribute):
        return is_config_name(node.attr)
    return string_key(node) is not None


def config_lookups(tree: ast.AST) -> list[tuple[int, str, bool]]:
    """(line, key, ends a chain) of every raw configuration lookup in a module."""
    found = [(node, key) for node in ast.walk(tree) if (key := string_key(node)) is not None]
    bases = {id(n.value if isinstance(n, ast.Subscript) else n.func.value) for n, _ in found}
    return sorted((node.lineno, key, id(node) not in bases) for node, key in found)


def long_functions(tree: ast.AST) -> list[tuple[str, int, int]]:
    """(qualified name, line, length) of every function of LONG_FUNCTION_LINES lines or more."""
    out = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1
                    if length >= LONG_FUNCTION_LINES:
                        out.append((name, child.lineno, length))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", nargs="?", default="src/adloco", help="package folder")
    parser.add_argument("--list", action="store_true", help="print every lookup")
    args = parser.parse_args(argv)
    root = Path(args.package)
    lookups: dict[Path, list[tuple[int, str, bool]]] = {}
    functions: list[tuple[Path, str, int, int]] = []
    modules: list[tuple[Path, int]] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        rel = path.relative_to(root)
        lookups[rel] = config_lookups(tree)
        functions += [(rel, *f) for f in long_functions(tree)]
        lines = len(text.splitlines())
        if lines > LONG_MODULE_LINES:
            modules.append((rel, lines))
    total = sum(len(v) for v in lookups.values())
    chains = sum(end for v in lookups.values() for _, _, end in v)
    print(f"raw configuration lookups: {total} (in {chains} chains)")
    for rel, found in sorted(lookups.items(), key=lambda kv: -len(kv[1])):
        if found:
            top = Counter(k for _, k, _ in found).most_common(3)
            print(f"  {len(found):4d}  {rel}  (most: {', '.join(f'{k} {n}' for k, n in top)})")
            if args.list:
                for line, key, _ in found:
                    print(f"          {rel}:{line}  {key!r}")
    print(f"functions of {LONG_FUNCTION_LINES}+ lines: {len(functions)}")
    for rel, name, line, length in sorted(functions, key=lambda f: -f[3]):
        print(f"  {length:4d}  {rel}:{line}  {name}")
    print(f"modules over {LONG_MODULE_LINES} lines: {len(modules)}")
    for rel, lines in sorted(modules, key=lambda m: -m[1]):
        print(f"  {lines:4d}  {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
