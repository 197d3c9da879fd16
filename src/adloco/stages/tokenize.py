"""``adloco tokenize``: C4-format records into packed shards (adloco.data.tokenize)."""

from __future__ import annotations

import argparse

from adloco.core import paths
from adloco.stages.common import CONFIG, PARAMS_FILE, RAW, TOKENIZED
from adloco.stages.declaration import Dvc, Path_, Stage, arg, keys


def run(args: argparse.Namespace) -> int:
    from adloco.data.tokenize import tokenize

    return tokenize(STAGE.request_from(args))


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
    request="adloco.data.tokenize.TokenizeRequest",
    out_files=("out",),
    keys=keys("seed", "data"),
    dvc=Dvc(
        args=(("--config", PARAMS_FILE), ("--raw", RAW), ("--out", TOKENIZED)),
        deps=(Path_(RAW),),
        outs=(Path_(TOKENIZED),),
    ),
)
