"""Every CUDA path of the project in one command, each step under its own time limit.

    python scripts/gpu_check --device cuda --out DIR      (through scripts/gpu-check.sh)
    python scripts/gpu_check --device cpu --out DIR       (the same steps at toy sizes)

Writes DIR/gpu-check.json (each step's status and figures, the versions, the
GPU) and DIR/gpu-check.log (every step's output), plus the two calibration
files; docs/gpu-check.md says what each figure is and where it goes.
Exit status 0 when every step passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import configs
import steps as plan_steps
from runner import Runner

# Seconds the whole check may take by default: under the device's 10-minute command limit.
BUDGET_S = {"full": 540, "toy": 290, "quick": 120}
# Peak dense bf16 TFLOP/s by GPU name, for the benchmark's model FLOPs utilisation.
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}


def cuda_devices() -> tuple[int, float | None]:
    """GPUs and the first one's peak bf16 TFLOP/s, without touching CUDA in this process."""
    try:
        names = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return 0, None
    peak = next((v for k, v in PEAK_TFLOPS.items() if names and k in names[0]), None)
    return len(names), peak


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--out", required=True, type=Path, help="folder for the JSON, log and files")
    ap.add_argument(
        "--size",
        choices=configs.SIZES,
        default=None,
        help="full on cuda, toy on cpu by default; quick: the suite's seconds-long form",
    )
    ap.add_argument(
        "--prepared",
        type=Path,
        default=configs.ROOT / ".gpu-check" / "data",
        help="tokenized data folders carried over (scripts/gpu-check-prepare.sh); "
        "what is missing is prepared here",
    )
    ap.add_argument(
        "--work", type=Path, default=None, help="scratch folder (default: a temporary one)"
    )
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for the whole check")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per process")
    ap.add_argument("--only", nargs="+", default=None, help="run these steps (and what they need)")
    ap.add_argument("--list", action="store_true", help="print the steps and their commands")
    args = ap.parse_args(argv)
    # gpu-check.sh runs this from the repository root: a relative folder is the caller's.
    caller = Path(os.environ.get("GPU_CHECK_CWD") or os.getcwd())
    for name in ("out", "work", "prepared"):
        folder = getattr(args, name)
        if folder is not None and not folder.is_absolute():
            setattr(args, name, caller / folder)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    size = args.size or ("full" if args.device == "cuda" else "toy")
    gpus, peak = cuda_devices() if args.device == "cuda" else (0, None)
    if args.device == "cuda" and gpus == 0:
        print("gpu-check: --device cuda, but nvidia-smi lists no GPU", file=sys.stderr)
        return 2
    threads = args.threads or (4 if args.device == "cuda" else min(2, os.cpu_count() or 1))
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    plan = plan_steps.Plan(size, args.device, work, args.prepared, threads, peak, gpus)
    steps = plan.steps()
    if args.only:
        wanted = set(args.only)
        for step in reversed(steps):
            if step.name in wanted:
                wanted.update(step.needs)
        steps = [s for s in steps if s.name in wanted]
    if args.list:
        print(plan_steps.describe(steps))
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
        return 0
    header = {
        "device": args.device,
        "size": size,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "threads": threads,
        "peak_tflops": peak,
    }
    runner = Runner(args.out, work, args.budget_s or BUDGET_S[size], header)
    start = time.monotonic()
    for step in steps:
        entry = runner.run(step)
        print(f"[{time.monotonic() - start:6.1f} s] {entry['status']:8s} {step.name}", flush=True)
    for exp in ("default", "paper-shape"):
        found = plan.calibration_dir(exp) / f"{plan.device_name[exp]}.json"
        if found.exists():
            shutil.copyfile(found, args.out / f"calibration-{exp}.json")
    print(runner.summary())
    print(f"gpu-check: {args.out / 'gpu-check.json'}, {args.out / 'gpu-check.log'}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all(e["status"] == "passed" for e in runner.report["steps"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
