"""The default's ``train.eval_batch`` evaluates to the same floats as the batch it replaced.

``eval_batch`` was 64 (the default's whole evaluation in one pass); a smaller
batch is cheaper on a CPU (benchmarks/bench_eval_batch.py) only if every
evaluation's loss, perplexity and standard error stay the same to the bit, so
that no run, base or verdict moves. Checked in a fresh process per pinned mode
(the mode's MKL branch decides the floats): on the default model at its seeded
initialisation, and on a real base, the test preset pretrained end to end,
evaluated on the default's number of validation sequences of its split.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from numerics_modes import run_in_mode

ROOT = Path(__file__).resolve().parents[2]
OLD_EVAL_BATCH = 64

CHILD = """
import json, sys
from pathlib import Path

from adloco.core import numerics

numerics.pin(1)
import torch

from adloco.cli import main
from adloco.config import load_config
from adloco.config.yaml_file import dump_yaml, read_yaml
from adloco.data.reader import TokenData
from adloco.model.llama import build_model, evaluate, evaluation_sample, load_pretrained

root, folder, old = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
default = load_config(root / "config" / "config.yaml")
settings = default.run(next(iter(default.runs)))
new, n = settings.eval_batch, settings.eval_sequences


def both(model, seqs):
    return [repr(sorted(evaluate(model, seqs, b).items())) for b in (old, new)]


out = {"new": new, "mode": numerics.record()["mode"]}
vocab, seq_len = default.data.tokenizer.vocab_size, default.data.seq_len_tokens
model = build_model(default.model, vocab, seq_len, default.seed)
gen = torch.Generator().manual_seed(0)
out["default model"] = both(model, torch.randint(0, vocab, (n, seq_len), generator=gen))

raw = read_yaml(root / "config" / "test.yaml")
raw["data"]["raw_dir"] = str(folder / "raw")
cfg = folder / "test.yaml"
cfg.write_text(dump_yaml(raw, sort_keys=False))
tok, base = str(folder / "tok"), folder / "base"
for argv in (
    ["prepare-corpus", "--config", str(cfg), "--out", str(folder / "raw")],
    ["tokenize", "--config", str(cfg), "--raw", str(folder / "raw"), "--out", tok],
    ["pretrain", "--config", str(cfg), "--data", tok, "--out", str(base),
     "--checkpoints", str(folder / "ckpt"), "--no-progress"],
):
    assert main(argv) == 0, argv
summary = json.loads((base / "base.json").read_text())
model = load_pretrained(str(base / summary["model_dir"]), torch.float32)
seqs = evaluation_sample(TokenData.open(tok).split("validation"), n)
out["sequences"] = int(seqs.size(0))
out["real base"] = both(model, seqs)
print(json.dumps(out))
"""


@pytest.mark.heavy
@pytest.mark.parametrize("mode", ["fast", "portable"])
def test_the_default_eval_batch_evaluates_as_the_old_one_to_the_bit(tmp_path, mode):
    done = run_in_mode(
        [sys.executable, "-c", CHILD, str(ROOT), str(tmp_path), str(OLD_EVAL_BATCH)], mode
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["mode"] == mode
    assert got["sequences"] > got["new"]  # more than one batch: the split is exercised
    for what in ("default model", "real base"):
        old, new = got[what]
        assert new == old, f"{what}, {mode}: eval_batch {got['new']} gives {new}, 64 gave {old}"
