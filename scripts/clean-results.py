"""Remove everything one experiment computed: results/<experiment>/ and logs/<experiment>/.

    python scripts/clean-results.py EXPERIMENT     # (make clean-results EXPERIMENT=...)

The folders are the ones adloco.core.paths lays out. An empty or odd name
(a path, '..', a space) is refused in one line before anything is removed, and
so is a folder that would not lie inside results/ or logs/: the removal can
never reach outside the experiment's own two folders.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src")]
from adloco.core import paths  # noqa: E402

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def folders(experiment: str, root: Path = ROOT) -> list[Path]:
    """The experiment's results and logs folders, checked to lie inside results/ and logs/."""
    if not NAME.fullmatch(experiment or "") or ".." in experiment:
        raise ValueError(
            f"experiment {experiment!r}: not an experiment name (letters, digits, _ . -); "
            "give the name in the configuration's `experiment:`"
        )
    out = []
    for parent, folder in (
        (paths.RESULTS, paths.experiment_dir(experiment)),
        (paths.LOGS, paths.logs_dir(experiment)),
    ):
        parent, folder = (root / parent).resolve(), (root / folder).resolve()
        if folder.parent != parent:
            raise ValueError(f"{folder}: not a folder of {parent}; nothing removed")
        out.append(folder)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("clean-results: usage: clean-results.py EXPERIMENT", file=sys.stderr)
        return 2
    try:
        targets = folders(args[0])
    except ValueError as exc:
        print(f"clean-results: error: {exc}", file=sys.stderr)
        return 2
    for folder in targets:
        if folder.is_symlink():
            folder.unlink()  # a link is removed, never what it points to
        elif folder.exists():
            shutil.rmtree(folder)
        else:
            print(f"clean-results: {folder} is not there")
            continue
        print(f"clean-results: removed {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
