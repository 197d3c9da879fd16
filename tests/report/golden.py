"""The report's golden outputs: `adloco report` on the engine fixture, byte for byte.

    .venv/bin/python tests/report/golden.py --write   # after a change meant to alter the page

Renders the report of tests/report/fixtures/engine twice (the plain page, and
one with a roofline device, a network and another model size's claims) and
keeps every text file it writes under tests/report/fixtures/golden/<case>/.
The page's embedded PNGs are replaced by the SHA-256 of their bytes, and the
figure files are listed by theirs in ``figures.sha256``, so the stored page
stays small while any change to a drawn pixel still shows. A refactor of the
report must leave these files unchanged; ``test_golden.py`` checks it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENGINE = HERE / "fixtures" / "engine"
GOLDEN = HERE / "fixtures" / "golden"
# What --compare-scale reads of the 4x preset's claims.json (its model size, each claim's
# verdict and headline ratios), kept beside the fixture: git keeps no report's claims.json.
SCALE_CLAIMS = HERE / "fixtures" / "scale-4x-claims.json"

CASES: dict[str, list[str]] = {
    "plain": [],
    "devices": [
        "--roofline", "knee-4=0.001,4",
        "--network", "slow=1,0.01",
        "--compare-scale", "scale",
    ],
}  # fmt: skip
TEXT_SUFFIXES = (".html", ".json", ".csv")
EMBEDDED_PNG = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")
# The page names the checkout's commit: masked, so a new commit changes no golden file.
COMMIT = re.compile(
    r"commit [0-9a-f]{12} of \d{4}-\d{2}-\d{2}( with uncommitted changes to src/adloco)?"
)


def png_digest(match: re.Match) -> str:
    digest = hashlib.sha256(base64.b64decode(match.group(1))).hexdigest()
    return f"data:image/png;sha256,{digest}"


def render(case: str, work: Path, references_and_base) -> Path:
    """Run `adloco report` for ``case`` in ``work``; returns the output folder.

    Every input is copied into ``work`` and named relative to it, so the paths
    the page and the claims quote are the same in any checkout.
    """
    references_and_base(work / "inputs")
    shutil.copytree(ENGINE, work / "engine")
    (work / "scale").mkdir()
    shutil.copy(SCALE_CLAIMS, work / "scale" / "claims.json")
    command = [
        sys.executable, "-m", "adloco", "report",
        "--config", "engine/config.yaml", "--runs", "engine/runs",
        "--calibration", "engine/calibration", "--variance", "engine/variance",
        "--data", "inputs/data", "--base", "inputs/base", "--out", "report", *CASES[case],
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, text=True, cwd=work)
    return work / "report"


def comparable(out: Path) -> dict[str, str]:
    """The report's files as the golden folder keeps them: relative path -> text."""
    files: dict[str, str] = {}
    for path in sorted(out.rglob("*")):
        name = path.relative_to(out).as_posix()
        if path.suffix in TEXT_SUFFIXES and not name.startswith("."):
            text = EMBEDDED_PNG.sub(png_digest, path.read_text(encoding="utf-8"))
            files[name] = COMMIT.sub("commit <commit>", text)
    figures = sorted(out.glob("figures/*.png"))
    files["figures.sha256"] = "".join(
        f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in figures
    )
    return files


def stored(case: str) -> dict[str, str]:
    folder = GOLDEN / case
    return {
        p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the golden folders")
    args = parser.parse_args()
    import importlib.util
    import tempfile

    spec = importlib.util.spec_from_file_location("report_conftest", HERE / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            files = comparable(render(case, Path(tmp), conftest.write_references_and_base))
        if not args.write:
            same = files == stored(case)
            print(f"{case}: {'same' if same else 'DIFFERENT'}")
            continue
        shutil.rmtree(GOLDEN / case, ignore_errors=True)
        for name, text in files.items():
            (GOLDEN / case / name).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / case / name).write_text(text, encoding="utf-8")
        print(f"{case}: wrote {len(files)} files to {GOLDEN / case}")


if __name__ == "__main__":
    main()
