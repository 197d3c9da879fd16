"""Write docs/calibration.md's "Measured figures" block from a calibration file.

    python scripts/calibration-figures.py results/default/calibration/cpu-sim.json \
        [--docs docs/calibration.md] [--check]

Reads the JSON that ``adloco calibrate`` wrote and replaces the block between
``<!-- calibration:begin -->`` and ``<!-- calibration:end -->`` with: the
device and model it was measured for, each memory trial and its peak, the max
batch, and the step-time table (the measured pass by micro-batch, per
sequence, and the clock's curve). So the docs quote a calibration as it was
written. ``--check`` writes nothing and exits 1 when the block differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doc_blocks import write_or_check  # noqa: E402

BEGIN, END = "<!-- calibration:begin -->", "<!-- calibration:end -->"
MB = 1e6


def interpolate(batches: list[int], seconds: list[float], b: int) -> float:
    """The clock's curve at micro-batch ``b``: linear between its points, flat before the first,
    on along its last segment after the last."""
    if b <= batches[0]:
        return seconds[0]
    i = next((i for i in range(1, len(batches)) if b <= batches[i]), len(batches) - 1)
    b0, b1, s0, s1 = batches[i - 1], batches[i], seconds[i - 1], seconds[i]
    return s0 + (s1 - s0) * (b - b0) / (b1 - b0)


def trials_text(trials: list[dict]) -> str:
    said = ", ".join(f"{t['batch']} {'fits' if t['fits'] else 'fails'}" for t in trials)
    peaks = ", ".join(f"{t['peak_bytes'] / MB:.1f} MB at {t['batch']}" for t in trials)
    return f"{len(trials)} trials ({said}); peaks {peaks}"


def step_table(record: dict) -> str:
    measured, curve = record["step_time_measured"], record["step_time_curve"]
    batches, seconds = measured["batches"], measured["fwd_bwd_s"]
    clock = [interpolate(curve["batches"], curve["fwd_bwd_s"], b) for b in batches]
    model = record["step_time"]["model"]
    rows = [
        ["micro-batch", *map(str, batches)],
        ["measured pass, ms (median)", *(f"{s * 1e3:.1f}" for s in seconds)],
        ["ms per sequence", *(f"{s * 1e3 / b:.1f}" for s, b in zip(seconds, batches, strict=True))],
        [f"the clock's curve ({model}), ms", *(f"{s * 1e3:.1f}" for s in clock)],
    ]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def block(path: Path) -> str:
    r = json.loads(path.read_text())
    slots = r["nodes_per_device"]
    update = r["step_time_measured"]["update_s"] * 1e3
    declared = r["step_time_curve"]["update_s"] * 1e3
    return (
        f"{BEGIN}\n"
        f"Written by `scripts/calibration-figures.py {path}` from the file as calibrated "
        f"(torch {r['torch_version']}, method {r['method']}). Device `{r['device']}`: "
        f"{r['memory_bytes'] / 2**30:g} GiB, {slots} slots {r['slot_sharing']}, "
        f"{r['budget_bytes'] / 2**20:g} MiB per slot at margin {r['margin']:g}; model of "
        f"{r['model_parameters']:,} parameters, vocabulary {r['vocab_size']:,}, "
        f"{r['seq_len_tokens']} tokens, {r['dtype']}, {r['steps_per_trial']} AdamW steps per "
        f"trial. {trials_text(r['trials'])}. Raw max batch {r['raw_max_batch']}, `max_batch` "
        f"{r['max_batch']}.\n\n"
        f"{step_table(r)}\n\n"
        f"The measured update (AdamW over the model) takes {update:.1f} ms; the clock's "
        f"curve charges {declared:.1f} ms.\n"
        f"{END}\n"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("calibration", type=Path, help="a calibration file (adloco calibrate)")
    ap.add_argument("--docs", type=Path, default=Path("docs/calibration.md"))
    ap.add_argument("--check", action="store_true", help="exit 1 when the docs differ")
    args = ap.parse_args(argv)
    return write_or_check(
        args.docs, block(args.calibration), BEGIN, END, args.calibration, args.check
    )


if __name__ == "__main__":
    raise SystemExit(main())
