"""The default pipeline from scratch, timed on a fresh clone, against this machine's speed.

``make run`` should take at most 15 minutes on 2 quiet cores (issue 44). On a shared machine its
wall time follows the machine's speed of the moment, which moves by 2x within
a day, so a wall time alone cannot say whether the goal is met. This script
measures the baseline in the same run: the plain PyTorch loop of
``bench_engine.py`` (1 thread, the default model, batch 8), just before and
just after the pipeline. It prints

1. the pipeline's wall time and CPU time: ``snakemake --cores all`` (what
   ``make run`` runs after its set-up) on a fresh clone of ``--rev``, with the
   corpus, tokenization, base, calibration, training, variance and report all
   made from scratch;
2. its cost in the baseline's units: wall time x plain-loop tokens/s, the
   tokens the plain loop trains in the time the pipeline takes. The pipeline
   is compute-bound on one thread per job, so this cost stays put when the
   machine's speed moves between runs (its range uses the speed before and
   after). The speed also moves during a run, which neither probe sees: two
   runs of the same pipeline an hour apart gave costs 24 % apart (README), so
   run it more than once and quote every run;
3. the wall time that cost gives at ``--reference-tokens-per-s`` (this
   machine's plain loop at its full speed, README "Measured figures"), against
   the goal;
4. whether the report files git keeps came out equal to the committed ones.

The clone uses this checkout's virtual environment (no set-up is timed) and its
own ``src/`` (``PYTHONPATH``), so it measures ``--rev`` as committed; the
checkout's own files are not touched. The clone is deleted afterwards unless
``--keep`` names a folder to leave it in.

Usage: .venv/bin/python benchmarks/bench_make_run.py [--rev HEAD] [--cores all]
       [--reference-tokens-per-s 23552] [--goal-min 15] [--keep DIR] [--json PATH]
       [--results benchmarks/RESULTS.md]

Each run appends a row to ``--results`` (benchmarks/RESULTS.md), the history
the README's "Measured figures" no longer carries.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
# The default report's files git keeps (dvc metrics and plots read them).
COMMITTED_REPORT_FILES = (
    "results/default/report/metrics.json",
    "results/default/report/median_curves.csv",
)
RESULTS_HEADER = """# Measured runs of the benchmarks

Every run of a benchmark that keeps a history appends a row here (so the
`make run` table, which `benchmarks/bench_make_run.py` appends to, stays last);
the README's "Measured figures" quotes the current one.

## `make run` (`benchmarks/bench_make_run.py`)

The default pipeline from scratch on a fresh clone: wall and CPU time, the
plain loop's speed just before and after (tokens/s, 1 thread), that speed over
the reference 23,552 tokens/s, the cost (wall time x plain-loop speed) and the
wall time that cost gives at the reference speed, against the 15-minute goal
(`--goal-min`; the rows of 2026-11 were judged against 10 minutes).
Other work on the machine during a run is not in the probes: it shows as few
cores busy (CPU / wall well below 2) and a cost too high.

| date (UTC) | commit | wall | CPU | plain loop before / after | speed | cost | at full speed |
| --- | --- | --- | --- | --- | --- | --- | --- |
"""


def plain_loop_tokens_per_s(json_path: Path) -> float:
    """The plain loop of ``bench_engine.py`` (fastest of 7 repeats, as its default), tokens/s."""
    subprocess.run(
        [
            sys.executable, str(ROOT / "benchmarks" / "bench_engine.py"),
            "--repeats", "7", "--skip-exact", "--slots", "4", "--slot-batches", "4",
            "--slot-repeats", "1", "--json", str(json_path),
        ],
        cwd=ROOT, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return json.loads(json_path.read_text())["plain_tokens_per_s"]


def minutes(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60} s"


def clone(rev: str, into: Path) -> str:
    """A fresh clone of this repository at ``rev``; its commit."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "-q", rev], check=True)
    return subprocess.run(
        ["git", "-C", str(into), "rev-parse", "--short", "HEAD"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--rev", default="HEAD", help="commit to clone (default: HEAD)")
    ap.add_argument("--cores", default="all", help="snakemake --cores (make run: all)")
    ap.add_argument(
        "--reference-tokens-per-s",
        type=float,
        default=23552.0,
        help="the plain loop at this machine's full speed (README, Measured figures)",
    )
    ap.add_argument("--goal-min", type=float, default=15.0, help="the goal, minutes")
    ap.add_argument("--keep", default=None, help="leave the clone (with its results) here")
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    ap.add_argument(
        "--results",
        default=str(RESULTS),
        help="append a row to this Markdown table (the history of every run; '' for none)",
    )
    args = ap.parse_args()
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", args.rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    if dirty and args.rev == "HEAD":
        print("note: uncommitted changes are not measured (the clone is of HEAD)")

    with tempfile.TemporaryDirectory(prefix="bench-make-run-") as scratch:
        scratch = Path(scratch)
        where = Path(args.keep).resolve() if args.keep else scratch / "clone"
        if where.exists():
            sys.exit(f"bench_make_run: {where} exists; --keep needs a new folder")
        commit = clone(rev, where)
        env = dict(os.environ)
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(where / "src")  # the clone's code, not the editable install's
        speed_before = plain_loop_tokens_per_s(scratch / "before.json")
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        with open(scratch / "snakemake.log", "w") as log:
            done = subprocess.run(
                [str(VENV_BIN / "snakemake"), "--cores", args.cores],
                cwd=where, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        wall_s = time.perf_counter() - start
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            tail = (scratch / "snakemake.log").read_text().splitlines()[-30:]
            sys.exit("bench_make_run: snakemake failed:\n" + "\n".join(tail))
        speed_after = plain_loop_tokens_per_s(scratch / "after.json")
        moved = committed_files_moved(where)
    cpu_s = sum(getattr(cpu_after, f) - getattr(cpu_before, f) for f in ("ru_utime", "ru_stime"))
    mean_speed = (speed_before + speed_after) / 2
    cost = wall_s * mean_speed
    cost_low, cost_high = sorted(wall_s * s for s in (speed_before, speed_after))
    at_reference, low, high = (c / args.reference_tokens_per_s for c in (cost, cost_low, cost_high))
    goal_s = args.goal_min * 60
    print(f"fresh clone of {commit}: snakemake --cores {args.cores} (make run after its set-up)")
    print(f"wall {minutes(wall_s)}, CPU {minutes(cpu_s)} ({cpu_s / wall_s:.2f} cores busy)")
    print(
        f"plain loop (bench_engine.py, 1 thread): {speed_before:,.0f} tokens/s before, "
        f"{speed_after:,.0f} after ({mean_speed / args.reference_tokens_per_s:.2f}x the "
        f"reference {args.reference_tokens_per_s:,.0f})"
    )
    print(
        f"cost: wall x plain-loop speed = {cost / 1e6:.2f} M plain-loop tokens "
        f"({cost_low / 1e6:.2f} to {cost_high / 1e6:.2f})"
    )
    print(
        "the report files git keeps: "
        + (f"differ from the committed ones: {', '.join(moved)}" if moved else "equal to the bit")
    )
    verdict = "met" if high <= goal_s else "not met" if low > goal_s else "undecided"
    print(
        f"at the reference speed: {minutes(at_reference)} ({minutes(low)} to {minutes(high)}); "
        f"goal <= {args.goal_min:g} min: {verdict}"
    )
    if args.json:
        figures = {
            "commit": commit,
            "cores": args.cores,
            "wall_s": wall_s,
            "cpu_s": cpu_s,
            "plain_tokens_per_s_before": speed_before,
            "plain_tokens_per_s_after": speed_after,
            "cost_plain_loop_tokens": cost,
            "reference_tokens_per_s": args.reference_tokens_per_s,
            "wall_s_at_reference": at_reference,
            "wall_s_at_reference_range": [low, high],
            "goal_s": goal_s,
            "verdict": verdict,
            "committed_report_files_moved": moved,
        }
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    if args.results:
        append_row(
            Path(args.results),
            [
                time.strftime("%Y-%m-%d %H:%M"), commit, minutes(wall_s), minutes(cpu_s),
                f"{speed_before:,.0f} / {speed_after:,.0f}",
                f"{mean_speed / args.reference_tokens_per_s:.2f}x",
                f"{cost / 1e6:.2f} M", f"{minutes(at_reference)} ({verdict})",
            ],
        )  # fmt: skip
    if args.keep:
        print(f"clone and its results left in {where}")


def committed_files_moved(clone_dir: Path) -> list[str]:
    """The report files git keeps that the run wrote with other bytes than the commit's.

    In the numerics mode that wrote them (portable; docs/numerics.md) a fresh
    run writes them again byte for byte; one that moved names a float that
    differs (fast mode on another MKL branch gives other last digits), or a
    commit whose configuration changed since they were written.
    """
    out = subprocess.run(
        ["git", "-C", str(clone_dir), "status", "--porcelain", "--", *COMMITTED_REPORT_FILES],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return sorted(line[3:] for line in out.splitlines() if line.strip())


def append_row(path: Path, cells: list[str]) -> None:
    """One row more of ``path``'s table of runs (the file and its header made when missing)."""
    if not path.exists():
        path.write_text(RESULTS_HEADER)
    with path.open("a") as out:
        out.write("| " + " | ".join(cells) + " |\n")


if __name__ == "__main__":
    main()
