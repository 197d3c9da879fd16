"""The floats a short pipeline computes, to the bit: the committed fingerprint of the numerics.

Runs, in a temporary folder and one process pinned as every ``adloco`` command
is (adloco.core.numerics, in the mode ``--mode`` or ``ADLOCO_NUMERICS`` names):
the test preset (config/test.yaml) end to end through
``adloco.cli.main`` (corpus, tokenization, the base model, calibration, then
seed 0 of every run), and a few AdamW steps of the default model
(config/config.yaml) on seeded random tokens. It keeps the numbers a drift in
the float paths moves first: each evaluation's losses and perplexities, and a
sha256 of every final model's weights (tensor bytes in name order). The wall
and simulated clocks are left out (the one is not reproducible, the other is
the calibration's business, not the numerics').

One fingerprint per mode: ``portable``'s, tests/fixtures/fingerprint.json, is
the same on every x86-64 CPU with AVX2; ``fast``'s depends on MKL's branch for
the CPU, so there is one per branch (adloco.core.numerics.mkl_branch),
tests/fixtures/fingerprint-fast-<branch>.json, for each branch someone recorded.
tests/test_fingerprint.py runs both and fails, naming each number that moved,
when the result is not the committed one bit for bit (a CPU whose branch has no
fast fingerprint skips that one). After an intended change of the numbers (a
new torch, a change to the model, the engine or the test preset), ``--write``
records the new ones: run it in both modes. ``native`` has no fingerprint of
its own: ``--check`` compares it with portable's (what pinning moves).

Usage: .venv/bin/python scripts/fingerprint.py [--mode fast|portable] [--write | --check]
       [--json PATH] [--threads N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "fingerprint.json"  # portable mode's
TEST_PRESET = ROOT / "config" / "test.yaml"
DEFAULT_PRESET = ROOT / "config" / "config.yaml"
REGENERATE = ".venv/bin/python scripts/fingerprint.py --mode MODE --write"

# The default model's short run: AdamW steps of a batch of seeded random tokens.
DEFAULT_STEPS = 4
DEFAULT_BATCH = 8
DATA_SEED = 0

# What the comparison leaves out: the process's settings, shown, not compared
# (a change there shows in the numbers, or does not matter).
NOT_COMPARED = ("numerics",)


def fixture(mode: str, branch: str | None) -> Path:
    """The committed fingerprint of ``mode`` (``native`` is compared with portable's)."""
    if mode == "fast":
        return FIXTURE.with_name(f"fingerprint-fast-{branch}.json")
    return FIXTURE


def weights_sha256(state: dict) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        tensor = state[name].detach().contiguous().cpu()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


def folder_weights_sha256(model_dir: Path) -> str:
    from safetensors.torch import load_file

    state = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        state.update(load_file(str(path)))
    return weights_sha256(state)


def test_preset(folder: Path, threads: list[str]) -> dict:
    """The test preset end to end: its base and every run's seed 0, as numbers."""
    from adloco.cli import main
    from adloco.config import load_config
    from adloco.config.yaml_file import dump_yaml, read_yaml

    raw = read_yaml(TEST_PRESET)
    raw["data"]["raw_dir"] = str(folder / "raw")
    config_file = folder / "test.yaml"
    config_file.write_text(dump_yaml(raw, sort_keys=False))
    config = load_config(config_file)
    cfg, tok, base, cal = str(config_file), str(folder / "tok"), folder / "base", folder / "cal"

    def stage(*argv: str) -> None:
        code = main([*argv])
        if code:
            raise SystemExit(f"adloco {argv[0]} failed ({code}) in {folder}")

    stage("prepare-corpus", "--config", cfg, "--out", str(folder / "raw"))
    stage("tokenize", "--config", cfg, "--raw", str(folder / "raw"), "--out", tok)
    stage("pretrain", "--config", cfg, "--data", tok, "--out", str(base),
          "--checkpoints", str(folder / "ckpt-base"), "--no-progress", *threads)  # fmt: skip
    for device in config.cluster.devices:
        stage("calibrate", "--config", cfg, "--data", tok, "--device", device.name,
              "--out", str(cal / f"{device.name}.json"), *threads)  # fmt: skip
    base_json = json.loads((base / "base.json").read_text())
    out = {
        "base": {
            "val_loss": base_json["val_loss"],
            "val_perplexity": base_json["val_perplexity"],
            "weights_sha256": folder_weights_sha256(base / base_json["model_dir"]),
        },
        "runs": {},
    }
    for run in config.runs:
        seed = config.run_seeds(run)[0]
        run_out = folder / "runs" / run
        stage("train", "--config", cfg, "--run-name", run, "--seed", str(seed), "--data", tok,
              "--calibration", str(cal), "--base", str(base), "--out", str(run_out),
              "--checkpoints", str(folder / "ckpt" / run), "--no-progress", *threads)  # fmt: skip
        summary = json.loads((run_out / "summary.json").read_text())
        rows = [json.loads(line) for line in (run_out / "metrics.jsonl").read_text().splitlines()]
        out["runs"][run] = {
            "seed": seed,
            "final_val_perplexity": summary["final_val_perplexity"],
            "best_val_perplexity": summary["best_val_perplexity"],
            # round, trainer, train loss, validation loss of every row
            "rows": [[r["round"], r["trainer"], r["train_loss"], r["val_loss"]] for r in rows],
            "weights_sha256": folder_weights_sha256(run_out / "final"),
        }
    return out


def default_model() -> dict:
    """A few AdamW steps of the default model (its first run's inner settings), as numbers."""
    import torch

    from adloco.config import load_config
    from adloco.engine.inner import make_optimizer
    from adloco.model.llama import batch_loss, build_model

    config = load_config(DEFAULT_PRESET)
    settings = config.run(next(iter(config.runs)))
    vocab, seq_len = config.data.tokenizer.vocab_size, config.data.seq_len_tokens
    model = build_model(config.model, vocab, seq_len, config.seed)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(DATA_SEED)
    data = torch.randint(0, vocab, (DEFAULT_STEPS, DEFAULT_BATCH, seq_len), generator=gen)
    opt = make_optimizer(params, settings)  # the engine's inner optimizer: AdamW here
    losses = []
    for seqs in data:
        for p in params:
            p.grad = None
        loss_sum, n = batch_loss(model, seqs)
        loss = loss_sum / n
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, settings.grad_clip_norm, foreach=True)
        opt.step()
        losses.append(loss.item())
    return {
        "steps": DEFAULT_STEPS,
        "batch": DEFAULT_BATCH,
        "losses": losses,
        "weights_sha256": weights_sha256(model.state_dict()),
    }


def fingerprint(
    threads: int | None = None, keep: Path | None = None, mode: str | None = None
) -> dict:
    """Every number of the fingerprint, and the numerics it was computed under (in ``mode``)."""
    from adloco.core import numerics

    if mode is not None:  # every stage's adloco.cli.main reads it again
        os.environ[numerics.MODE_VARIABLE] = mode
    # Before torch loads, as adloco.cli.main does (it pins again, to the same values).
    numerics.pin(threads)
    thread_args = ["--threads", str(threads)] if threads else []
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        preset = test_preset(keep, thread_args)
    else:
        with tempfile.TemporaryDirectory(prefix="adloco-fingerprint-") as tmp:
            preset = test_preset(Path(tmp), thread_args)
    import transformers

    record = numerics.record()
    record["transformers"] = transformers.__version__
    return {"numerics": record, "test_preset": preset, "default_model": default_model()}


def flatten(value, where: str = "") -> dict[str, object]:
    """{"a.b[0]": leaf} of a JSON value."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(flatten(item, f"{where}.{key}" if where else str(key)))
        return out
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(flatten(item, f"{where}[{i}]"))
        return out
    return {where: value}


def differences(expected: dict, got: dict) -> list[str]:
    """One line per number that is not the same to the bit (repr of floats), missing or new."""
    want = {k: v for k, v in flatten(expected).items() if not k.startswith(NOT_COMPARED)}
    have = {k: v for k, v in flatten(got).items() if not k.startswith(NOT_COMPARED)}
    lines = []
    for key in sorted(want.keys() | have.keys()):
        if key not in have:
            lines.append(f"{key}: missing (committed {want[key]!r})")
        elif key not in want:
            lines.append(f"{key}: new ({have[key]!r})")
        elif type(want[key]) is not type(have[key]) or want[key] != have[key]:
            lines.append(f"{key}: committed {want[key]!r}, now {have[key]!r}")
    return lines


def report(expected: dict, got: dict, path: Path = FIXTURE) -> str:
    """What drifted, under which numerics, and how to record the new numbers if intended."""
    lines = differences(expected, got)
    if not lines:
        return ""
    settings = flatten({"committed": expected.get("numerics"), "now": got.get("numerics")})
    return "\n".join(
        [f"{len(lines)} number(s) of the fingerprint drifted from {path.name}:", *lines]
        + ["under the numerics (adloco.core.numerics, docs/numerics.md):"]
        + [f"  {k}: {v!r}" for k, v in settings.items()]
        + [
            "A drift no change of this commit explains is a machine's (another CPU path, "
            "MKL branch, thread count or library version); after an intended change of the "
            f"numbers, record them in each mode (fast, portable): {REGENERATE}"
        ]
    )


def main() -> int:
    from adloco.core import numerics

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--mode",
        choices=numerics.MODES,
        default=None,
        help="the numerics (default: ADLOCO_NUMERICS's, else fast)",
    )
    action = ap.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true", help="write the mode's fingerprint")
    action.add_argument(
        "--check", action="store_true", help="compare with the mode's; exit 1 on a drift"
    )
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    ap.add_argument("--threads", type=int, default=None, help="intra-op threads (default: 1)")
    ap.add_argument("--keep", default=None, help="run in this folder and keep it")
    args = ap.parse_args()
    mode = args.mode or numerics.mode()
    if args.write and mode == numerics.NATIVE:
        ap.error("native floats are this machine's own: write a fast or portable fingerprint")
    got = fingerprint(args.threads, Path(args.keep) if args.keep else None, mode)
    path = fixture(mode, got["numerics"]["mkl_branch"])
    text = json.dumps(got, indent=2) + "\n"
    if args.json:
        Path(args.json).write_text(text)
    if args.write:
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
        return 0
    if args.check:
        if not path.is_file():
            print(
                f"no {path.relative_to(ROOT)}: no fast fingerprint for MKL branch "
                f"{got['numerics']['mkl_branch']} was recorded (--mode fast --write records it)"
            )
            return 2
        message = report(json.loads(path.read_text()), got, path)
        print(message or f"fingerprint: the same to the bit as {path.relative_to(ROOT)}")
        return 1 if message else 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
