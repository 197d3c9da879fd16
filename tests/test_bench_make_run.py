"""benchmarks/bench_make_run.py's check of the report files git keeps, on a real git clone."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_make_run.py"


def load():
    spec = importlib.util.spec_from_file_location("bench_make_run", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_a_rewrite_with_the_same_bytes_is_equal_and_another_is_named(tmp_path):
    bench = load()
    repo = tmp_path / "clone"
    files = [repo / name for name in bench.COMMITTED_REPORT_FILES]
    files[0].parent.mkdir(parents=True)
    files[0].write_text('{"time": {"ratio": 1.39}}\n')
    files[1].write_text("run,round\nadloco,1\n")
    git("init", "-q", cwd=repo)
    git("add", ".", cwd=repo)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x", cwd=repo)
    # A run writes both again: the same bytes (new files, same content) are equal.
    for path in files:
        text = path.read_text()
        path.unlink()
        path.write_text(text)
    assert bench.committed_files_moved(repo) == []
    files[1].write_text("run,round\nadloco,2\n")
    assert bench.committed_files_moved(repo) == ["results/default/report/median_curves.csv"]
