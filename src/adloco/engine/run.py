"""`adloco train`: one run of the configuration for one seed.

Reads the tokenized data and the calibration results, trains with
:class:`adloco.engine.loop.Engine`, and writes ``metrics.jsonl``,
``summary.json`` and ``final/`` (``save_pretrained`` with the tokenizer) into
the run folder. Checkpoints go to a separate folder (``--checkpoints``) that
Snakemake does not remove when a job fails, so running the same command again
resumes from the last complete round.
"""

from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="configuration YAML")
    parser.add_argument("--run", required=True, help="run name from `runs`")
    parser.add_argument("--seed", type=int, required=True, help="training seed")
    parser.add_argument("--data", required=True, help="tokenized data folder")
    parser.add_argument("--calibration", required=True, help="folder of calibration JSON files")
    parser.add_argument("--out", required=True, help="run folder, results/runs/<run>/seed<seed>")
    parser.add_argument(
        "--checkpoints", required=True, help="checkpoint folder (kept when a job fails)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (Snakemake passes {threads})",
    )


def max_batches(cfg: dict, calibration_dir: str | Path) -> dict[str, int]:
    from adloco.calibrate import load_max_batch

    return {dev["name"]: load_max_batch(calibration_dir, dev) for dev in cfg["cluster"]["devices"]}


def compute_device(cfg: dict):
    import torch

    if any(d["kind"] == "cuda" for d in cfg["cluster"]["devices"]):
        if not torch.cuda.is_available():
            raise ValueError("cluster.devices asks for cuda, but no CUDA device is visible")
        return torch.device("cuda")
    return torch.device("cpu")


def summarize(rows: list[dict], run_cfg: dict, seed: int, rounds: int, final_trainers: int) -> dict:
    by_round: dict[int, list[float]] = {}
    for r in rows:
        if r["val_perplexity"] is not None:
            by_round.setdefault(r["round"], []).append(r["val_perplexity"])
    last = rows[-1]
    return {
        "run": run_cfg["name"],
        "seed": seed,
        "method": run_cfg["method"],
        "rounds": rounds,
        "final_val_perplexity": min(by_round[max(by_round)]) if by_round else None,
        "best_val_perplexity": min(min(v) for v in by_round.values()) if by_round else None,
        "tokens_total": last["tokens_total"],
        "communications": last["communications"],
        "bytes_total": last["bytes_total"],
        "sim_time_s": last["sim_time_s"],
        "wall_time_s": last["wall_time_s"],
        "final_trainers": final_trainers,
    }


def run(args: argparse.Namespace) -> int:
    import torch

    from adloco.config import load_config, resolve_run
    from adloco.data.reader import TokenData
    from adloco.engine.loop import Engine
    from adloco.io import atomic_dir, atomic_path, write_json_atomic

    cfg = load_config(args.config)
    run_cfg = resolve_run(cfg, args.run)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    data = TokenData.open(args.data)
    engine = Engine(
        cfg,
        run_cfg,
        args.seed,
        data,
        max_batches(cfg, args.calibration),
        args.checkpoints,
        device=compute_device(cfg),
        progress=not args.no_progress,
    )
    rows = engine.run()
    out = Path(args.out)
    with atomic_path(out / "metrics.jsonl") as tmp:
        shutil.copyfile(engine.metrics_path, tmp)
    best = engine.best_trainer()
    model = engine.export_model(best)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(data.tokenizer_dir)
    with atomic_dir(out / "final") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    summary = summarize(rows, run_cfg, args.seed, engine.round, len(engine.trainers))
    summary["final_trainer"] = best.id
    write_json_atomic(out / "summary.json", summary)
    log.info(
        "%s seed %d: final val perplexity %s", args.run, args.seed, summary["final_val_perplexity"]
    )
    return 0
