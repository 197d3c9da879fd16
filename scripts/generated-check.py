"""Check that the generated files of the repository are what their sources give.

``make generated-check`` runs it. Each generated file is written afresh into a
temporary folder and compared with the checked-in one:

- ``src/adloco/schemas/config.schema.yaml``, from the configuration's
  declarations (``adloco.config.generate.schema_text()``);
- ``dvc.yaml``, from the stage table (``workflow/lib/adloco_workflow/dvc_yaml.py``);
- ``params.yaml``, the default preset ``config/config.yaml`` with every
  default written out (``adloco dvc-params``): a new setting's default changes it;
- ``config/tune.yaml``, the tune experiment: its grid declaration
  ``config/tune-grid.yaml`` over ``config/config.yaml``
  (``scripts/tune-grid.py``): a change to either changes it;
- ``config/pilot.yaml``, the seed-count pilot: ``config/config.yaml`` on held-out
  seeds (``scripts/seed-count.py preset``);
- ``environment.yml`` and ``workflow/envs/adloco.yaml``, the conda files, from
  ``requirements.lock``, the one set of pins (``scripts/lock.py``).

Exits 1 naming each file that differs, with the command that rewrites it;
nothing in the repository is written. ``--root <folder>`` checks another copy
of the repository (its checked-in files, this checkout's generators).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The preset whose copy for DVC git keeps as params.yaml.
DEFAULT_PRESET = "config/config.yaml"
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "workflow" / "lib")]

# (checked-in file, module with the generator (or a script of this checkout, by its path),
# its function, the command that rewrites it, the generator's arguments: the source file of
# this checkout it reads, if any)
GENERATED = (
    (
        "src/adloco/schemas/config.schema.yaml",
        "adloco.config.generate",
        "schema_text",
        "python -m adloco.config.generate",
        (),
    ),
    (
        "dvc.yaml",
        "adloco_workflow.dvc_yaml",
        "text",
        "python workflow/lib/adloco_workflow/dvc_yaml.py",
        (),
    ),
    ("params.yaml", "adloco.dvc.params", "params_text", "adloco dvc-params",
     (DEFAULT_PRESET, ROOT)),
    ("config/tune.yaml", "scripts/tune-grid.py", "tune_text",
     "python scripts/tune-grid.py --write", ("config/tune-grid.yaml", ROOT)),
    ("config/pilot.yaml", "scripts/seed-count.py", "preset_text",
     "python scripts/seed-count.py preset --write", (ROOT,)),
    ("environment.yml", "scripts/lock.py", "host_env_text",
     "python scripts/lock.py --from-lock", (ROOT,)),
    ("workflow/envs/adloco.yaml", "scripts/lock.py", "rule_env_text",
     "python scripts/lock.py --from-lock", (ROOT,)),
)  # fmt: skip


def generator(module: str, function: str) -> Callable[[], str] | None:
    """The generator ``module.function``, or None when this checkout has no such module."""
    if module.endswith(".py"):
        path = ROOT / module
        if not path.is_file():
            return None
        spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return getattr(loaded, function, None)
    try:
        return getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module.startswith(exc.name):
            raise
        return None
    except AttributeError:
        return None


def differences(root: Path, out: Path) -> tuple[list[str], list[str]]:
    """The files of ``root`` that differ from their generators' text, and those not checked."""
    differ, skipped = [], []
    for name, module, function, command, arguments in GENERATED:
        make = generator(module, function)
        if make is None:
            skipped.append(f"{name}: skipped, no {module}.{function} in this checkout")
            continue
        fresh = out / name
        fresh.parent.mkdir(parents=True, exist_ok=True)
        fresh.write_text(make(*arguments))
        checked_in = root / name
        old = checked_in.read_text() if checked_in.is_file() else ""
        if old != fresh.read_text():
            diff = difflib.unified_diff(
                old.splitlines(), fresh.read_text().splitlines(), name, "generated", lineterm=""
            )
            print("\n".join(list(diff)[:40]))
            chosen = other_preset(old) if name == "params.yaml" else None
            differ.append(chosen or f"{name}: differs from its source; run `{command}`")
    return differ, skipped


def other_preset(text: str) -> str | None:
    """What ``params.yaml``'s text is when ``adloco dvc-params`` made it from another preset."""
    first = text.split("\n", 1)[0]
    found = re.match(r"# Made by `adloco dvc-params --preset (\S+)`", first)
    if found is None or found[1] == DEFAULT_PRESET:
        return None
    return (
        f"params.yaml: made by `adloco dvc-params --preset {found[1]}` (a preset chosen "
        f"for DVC), where the repository keeps {DEFAULT_PRESET}'s copy; to commit it or pass "
        f"this check, run `adloco dvc-params --preset {DEFAULT_PRESET}`"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository to check")
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        print(
            f"generated-check: error: --root {args.root}: no such folder; give a copy of the "
            "repository (default: this checkout)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="generated-check-") as out:
        differ, skipped = differences(args.root, Path(out))
    for line in skipped:
        print(f"generated-check: {line}")
    for line in differ:
        print(f"generated-check: error: {line}", file=sys.stderr)
    if not differ:
        checked = len(GENERATED) - len(skipped)
        print(f"generated-check: {checked} generated file(s) match their sources")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
