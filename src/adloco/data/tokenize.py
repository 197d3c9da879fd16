"""Tokenize C4 records into packed, memory-mappable shards (`adloco tokenize`).

Second stage of the pipeline, after ``prepare-corpus`` (offline) or straight
from local C4 files or the hub. It reads records through
:mod:`adloco.data.c4`, builds the tokenizer (:mod:`adloco.data.tokenizer`;
BPE is trained on the training documents only), assigns each document to
validation, base (the documents the experiment's base model pretrains on,
``data.base_fraction``) or train, encodes documents in batches (``data.num_proc`` worker processes),
joins each split's documents with EOS and cuts the stream into sequences of
``data.seq_len_tokens`` without padding. The remainder shorter than one
sequence is dropped and counted. Last, the validation split's reference
perplexities (uniform, unigram, bigram; :mod:`adloco.data.reference`) go into
the manifest. Output, written atomically into
``data/tokenized/<dataset>/``: flat ``uint16``/``uint32`` shards, the
tokenizer folder and ``manifest.json`` (layout in docs/DESIGN.md and
docs/data.md), which :class:`adloco.data.reader.TokenData` verifies and reads.

The split of each document is a seeded hash of its position in the stream
(:mod:`adloco.data.splits`); the shards are written by
:mod:`adloco.data.shards` and the manifest built by
:mod:`adloco.data.manifest`. The same seed and input give the same bytes.

The stage's entry, :func:`tokenize`, takes its request
(:class:`TokenizeRequest`), loads the configuration, calls
:func:`tokenize_corpus` and logs each split's counts.
"""

from __future__ import annotations

import collections
import logging
import multiprocessing
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from adloco.config import DataConfig, load_config
from adloco.core import paths
from adloco.core.io import atomic_dir, write_json_atomic
from adloco.data import c4
from adloco.data import tokenizer as tok
from adloco.data.manifest import build_manifest, reference_levels
from adloco.data.shards import SHARD_TOKENS, ShardWriter, finish_splits
from adloco.data.splits import SPLIT_CODES, document_splits, splits_of, validation_mask

log = logging.getLogger(__name__)

# Documents per encode call: large enough to amortise the call, small enough
# that a worker's batch of C4 text stays a few MiB. A batch also ends once its
# texts reach BATCH_CHARS, so that long documents (each at most
# c4.MAX_RECORD_BYTES) bound a worker's memory too: encoding takes about 130
# bytes per byte of text.
BATCH_DOCUMENTS = 512
BATCH_CHARS = 1 << 20
# The writer named in the folder's manifest, which lists the tokenizer/ files
# too (adloco.core.io.check_replaceable).
WRITER = "adloco tokenize"


@dataclass(frozen=True, kw_only=True)
class TokenizeRequest:
    """What ``adloco tokenize`` is asked: its command line, typed (:mod:`adloco.stages.tokenize`).

    One field per argument of the stage, with its default
    (:func:`adloco.stages.declaration.request_problems` checks).
    """

    config: str | Path  # the configuration YAML
    out: str | Path  # the tokenized data folder written
    # The folder of C4-format *.json.gz files (sources offline-wiki, local);
    # None: data.raw_dir.
    raw: str | Path | None = None


def tokenize(request: TokenizeRequest) -> int:
    """``adloco tokenize``: the request's configured corpus tokenized into its ``out``."""
    raw = request.raw
    config = load_config(request.config)
    if config.data.source == "hub" and raw:
        log.info("data.source is hub: --raw %s is not read", raw)
    manifest = tokenize_corpus(config.data, config.seed, request.out, raw_dir=raw)
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


def batched_texts(
    records: Iterable[dict], size: int = BATCH_DOCUMENTS, chars: int = BATCH_CHARS
) -> Iterator[list[str]]:
    """The texts in batches of ``size`` documents, or fewer once they hold ``chars`` characters."""
    batch: list[str] = []
    held = 0
    for record in records:
        batch.append(record["text"])
        held += len(record["text"])
        if len(batch) == size or held >= chars:
            yield batch
            batch = []
            held = 0
    if batch:
        yield batch


def split_texts(
    records: Iterable[dict], seed: int, fraction: float, split: str = "train"
) -> Iterator[str]:
    """The texts of one split, in stream order (feeds BPE training)."""
    start = 0
    for batch in batched_texts(records):
        is_val = validation_mask(np.arange(start, start + len(batch)), seed, fraction)
        start += len(batch)
        for text, val in zip(batch, is_val, strict=True):
            if bool(val) == (split == "validation"):
                yield text


def encode_stream(
    batches: Iterable[list[str]],
    tokenizer_dir: Path,
    eos_token_id: int,
    dtype: Any,
    append_eos: bool,
    num_proc: int = 1,
) -> Iterator[tuple[Any, Any]]:
    """(flat ids, lengths) per batch, in input order, on ``num_proc`` processes.

    At most two batches per process are in flight, so a streamed corpus is
    never read ahead into memory.
    """
    if num_proc <= 1:
        backend = tok.load_backend(tokenizer_dir)
        for texts in batches:
            yield tok.encode_documents(backend, texts, eos_token_id, dtype, append_eos)
        return
    # spawn, not fork: the parent may hold Rust thread pools (BPE training).
    ctx = multiprocessing.get_context("spawn")
    initargs = (str(Path(tokenizer_dir) / "tokenizer.json"), eos_token_id, str(dtype), append_eos)
    with ctx.Pool(num_proc, initializer=tok.worker_init, initargs=initargs) as pool:
        pending: collections.deque = collections.deque()
        for texts in batches:
            pending.append(pool.apply_async(tok.worker_encode, (texts,)))
            if len(pending) >= 2 * num_proc:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _progress_bar(total: int | None, desc: str, progress: bool | None) -> Any:
    # progress None: tqdm decides (on for a terminal, off in a log file).
    return tqdm(
        total=total, desc=desc, unit="doc", disable=None if progress is None else not progress
    )


def tokenize_corpus(
    data: DataConfig,
    seed: int,
    out: str | Path,
    raw_dir: str | Path | None = None,
    *,
    shard_sequences: int | None = None,
    progress: bool | None = None,
) -> dict:
    """Tokenize the configured corpus into ``out`` (replaced atomically); return the manifest.

    ``data`` is the ``data`` section of the configuration; ``raw_dir``
    overrides ``data.raw_dir`` for local sources.
    """
    seq_len = data.seq_len_tokens
    if shard_sequences is None:
        shard_sequences = max(1, SHARD_TOKENS // seq_len)
    with (
        atomic_dir(out, WRITER, "--out") as tmp,
        tempfile.TemporaryDirectory(prefix="adloco-tok-") as scratch,
    ):
        tokenizer = build_tokenizer(data, seed, raw_dir, tmp, scratch, progress)
        writers = {
            s: ShardWriter(tmp, s, seq_len, tokenizer.dtype, shard_sequences)
            for s in splits_of(data)
        }
        stats = c4.RecordStats()
        records, source = c4.open_records(data, raw_dir, stats)
        documents = write_documents(records, tokenizer, writers, data, seed, progress)
        splits = finish_splits(writers, documents, seq_len)
        documents_read = sum(documents.values())
        _report_records(stats, documents_read)
        manifest = build_manifest(data, seed, tokenizer, splits, source, stats, documents_read)
        manifest["reference_perplexity"] = reference_levels(tmp, manifest).as_dict()
        write_json_atomic(paths.manifest_file(tmp), manifest)
    return manifest


def build_tokenizer(
    data: DataConfig,
    seed: int,
    raw_dir: str | Path | None,
    out: Path,
    scratch: str,
    progress: bool | None,
) -> tok.SavedTokenizer:
    """Build (a BPE trains on the train split's documents) or load the tokenizer; save it."""
    train_texts = None
    if data.tokenizer.kind == "bpe":
        bar = _progress_bar(data.max_documents, "bpe train", progress)
        records = c4.iter_records(data, raw_dir)
        train_texts = split_texts(_counting(records, bar), seed, data.validation_fraction, "train")
    tokenizer = tok.build_tokenizer(data.tokenizer, train_texts, scratch)
    if train_texts is not None:
        bar.close()
    return tok.SavedTokenizer(tok.save_tokenizer(tokenizer, out / "tokenizer"))


def write_documents(
    records: Iterable[dict],
    tokenizer: tok.SavedTokenizer,
    writers: dict[str, ShardWriter],
    data: DataConfig,
    seed: int,
    progress: bool | None,
) -> dict[str, int]:
    """Encode the records and send each document's tokens to its split; documents per split."""
    fraction = data.validation_fraction
    base = data.base_fraction
    batches = encode_stream(
        batched_texts(records),
        tokenizer.dir,
        tokenizer.eos_token_id,
        tokenizer.dtype,
        append_eos=not tokenizer.added["appends_eos"],
        num_proc=data.num_proc,
    )
    documents = dict.fromkeys(writers, 0)
    start = 0
    with _progress_bar(data.max_documents, "tokenize", progress) as bar:
        for flat, lengths in batches:
            if flat.size and int(flat.max()) >= tokenizer.vocab_size:
                raise ValueError(
                    f"tokenizer produced id {int(flat.max())} >= its vocabulary "
                    f"{tokenizer.vocab_size}"
                )
            split_of = document_splits(np.arange(start, start + lengths.size), seed, fraction, base)
            token_split = np.repeat(split_of, lengths)
            for name, writer in writers.items():
                code = SPLIT_CODES[name]
                writer.add(flat[token_split == code])
                documents[name] += int((split_of == code).sum())
            start += int(lengths.size)
            bar.update(int(lengths.size))
    return documents


def _report_records(stats: Any, documents: int) -> None:
    if stats.skipped:
        log.warning(
            "skipped %d bad records (data.on_bad_record: skip), counted in the manifest; first: %s",
            stats.skipped,
            stats.examples[0],
        )
    if stats.empty:
        log.warning(
            "%d documents have an empty text (of %d read): each adds only its EOS token",
            stats.empty,
            documents,
        )


def _counting(records: Iterable[dict], bar: Any) -> Iterator[dict]:
    for record in records:
        bar.update(1)
        yield record
