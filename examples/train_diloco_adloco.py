"""DiLoCo and AdLoCo on the test preset's data, through the library alone (no Snakemake).

    python examples/train_diloco_adloco.py [OUT]    # writes into OUT (results/example/)

Read top to bottom: the corpus, its tokens, the base model both runs continue,
the simulated devices' calibration, then each run. These are the functions the
`adloco <stage>` commands call (src/adloco/stages/) and Snakemake wires (workflow/).
Everything else comes from config/test.yaml: a 1-layer model, 3 rounds of 2 inner steps.
"""

# ruff: noqa: E402 (torch loads after the CPU float paths are pinned)
import json
import sys
from pathlib import Path

from adloco.core import numerics

# The float paths and threads `adloco` pins before torch loads (docs/numerics.md).
numerics.pin()

from adloco.calibrate.device import calibrate_device
from adloco.config import load_config
from adloco.data.corpus import prepare_wiki_corpus
from adloco.data.tokenize import tokenize_corpus
from adloco.formats.calibration import CalibrationRecord
from adloco.model.pretrain import PretrainRequest, pretrain_base
from adloco.train_run import TrainRequest, train

CONFIG = Path(__file__).resolve().parents[1] / "config" / "test.yaml"
out = Path(sys.argv[1] if len(sys.argv) > 1 else "results/example")
config = load_config(CONFIG)

# 1. The corpus: opening sections of Wikipedia articles as C4-format files (offline).
raw = out / "raw"
prepare_wiki_corpus(raw, config.data.max_documents)

# 2. Tokenize: a BPE trained on the corpus, documents packed into fixed-length sequences,
#    split into train, validation and base (the base model's documents, unseen by the runs).
tokens = out / "tokenized"
manifest = tokenize_corpus(config.data, config.seed, tokens, raw_dir=raw)

# 3. The base model both runs continue: plain AdamW on the base split.
base, checkpoints = out / "base", out / "checkpoints"
pretrain_base(
    PretrainRequest(
        config=CONFIG, data=tokens, out=base, checkpoints=checkpoints / "base", progress=False
    )
)

# 4. Each simulated device's max batch and step-time curve: the simulated clock's input.
calibration = out / "calibration"
vocab, seq_len = manifest["vocab_size"], manifest["seq_len_tokens"]
for device in config.cluster.devices:
    record = calibrate_device(config, device, vocab, seq_len)
    CalibrationRecord.write(calibration / f"{device.name}.json", record)

# 5. The runs: DiLoCo (one trainer, a constant batch) and AdLoCo (two trainers whose
#    batches the norm test sets, merged after round 2), from the same base and seed.
for run in ("diloco", "adloco"):
    request = TrainRequest(
        config=CONFIG,
        run=run,
        seed=config.run_seeds(run)[0],
        data=tokens,
        calibration=calibration,
        out=out / "runs" / run,
        checkpoints=checkpoints / run,
        base=base,
        progress=False,
    )
    if train(request) != 0:
        sys.exit(f"{run}: training failed")
    summary = json.loads((out / "runs" / run / "summary.json").read_text())
    print(
        f"{run}: validation perplexity {summary['final_val_perplexity']:.1f} after "
        f"{summary['rounds']} rounds, {summary['tokens_total']} tokens, "
        f"{summary['messages_total']} network messages, "
        f"{summary['sim_time_s']:.3g} simulated seconds"
    )
