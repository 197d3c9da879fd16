"""``adloco tokenize``: C4-format records into packed shards (adloco.data.tokenize)."""

from __future__ import annotations

import argparse
import logging

from adloco.core import paths
from adloco.stages.common import CONFIG, PARAMS_FILE, RAW, TOKENIZED
from adloco.stages.declaration import Dvc, Path_, Stage, arg, keys

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    from adloco.config import load_config
    from adloco.data.tokenize import tokenize_corpus

    raw: str | None = args.raw
    config = load_config(args.config)
    if config.data.source == "hub" and raw:
        log.info("data.source is hub: --raw %s is not read", raw)
    manifest = tokenize_corpus(config.data, config.seed, args.out, raw_dir=raw)
    for name in manifest["splits"]:
        split = manifest["splits"][name]
        log.info(
            "%s: %d documents, %d tokens, %d sequences of %d (%d tokens dropped)",
            name,
            split["documents"],
            split["tokens"],
            split["sequences"],
            manifest["seq_len_tokens"],
            split["dropped_tokens"],
        )
    ref = manifest["reference_perplexity"]
    log.info(
        "validation reference perplexities: uniform %.0f, unigram %.1f, bigram %.1f",
        ref["uniform"],
        ref["unigram"],
        ref["bigram"],
    )
    return 0


STAGE = Stage(
    name="tokenize",
    help="tokenize C4-format records into packed, memory-mappable shards",
    description="Load C4 records (local json.gz files or the hub), build or load the tokenizer, "
    "split documents into train/validation, pack them into fixed-length sequences "
    "joined by EOS, and write shards plus manifest.json with checksums.",
    arguments=(
        CONFIG,
        arg("--raw", help="folder of C4-format *.json.gz files (sources offline-wiki, local)"),
        arg("--out", required=True, help=f"output folder, {paths.tokenized_dir('<dataset>')}"),
    ),
    run=run,
    out_files=("out",),
    keys=keys("seed", "data"),
    dvc=Dvc(
        args=(("--config", PARAMS_FILE), ("--raw", RAW), ("--out", TOKENIZED)),
        deps=(Path_(RAW),),
        outs=(Path_(TOKENIZED),),
    ),
)
