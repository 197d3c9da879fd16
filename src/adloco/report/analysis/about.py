"""What was run, in the words of the report's first lines: model, data, device, seeds, code.

:func:`about_rows` reads the configuration, the tokenized data's manifest
(:class:`adloco.report.inputs.references.References.corpus`), the base model's
base.json and the runs' own settings, and gives one line per subject. The code
is named by the git commit of the checkout the report runs from and that
commit's date (:func:`code_commit`); outside a git checkout, the package
version alone. Nothing here reads a clock, so the same results and code give
the same lines.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from adloco import __version__
from adloco.config import Config
from adloco.formats.model_size import parameter_count
from adloco.report.inputs.references import Base, References
from adloco.report.inputs.results import RunSeed

PACKAGE_DIR = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(PACKAGE_DIR), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_commit() -> str:
    """``adloco <version>, commit <12 hex> of <date>`` (and uncommitted changes, if any)."""
    head = _git("log", "-1", "--format=%H %cs")
    if not head:
        return f"adloco {__version__} (not a git checkout)"
    sha, date = head.split()
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".")
    changed = " with uncommitted changes to src/adloco" if dirty else ""
    return f"adloco {__version__}, commit {sha[:12]} of {date}{changed}"


def _model(config: Config, vocab: int | None, base: Base | None) -> str:
    m = config.model
    if m.source == "pretrained":
        return f"{m.name} (pretrained, loaded by name), {m.dtype}"
    shape = f"Llama, {m.num_hidden_layers} layers × {m.hidden_size} wide"
    if vocab is not None:
        shape += f", {parameter_count(m, vocab):,} parameters"
    shape += f" ({m.dtype})"
    if m.source != "base":
        return shape + ", trained from random initialisation"
    if base is None:
        return shape + ", continued from a base model (not given to the report)"
    tokens = base.fields.get("tokens")
    seen = f" on {tokens:,} tokens of its own split" if isinstance(tokens, int) else ""
    return (
        f"{shape}, continued from a base pretrained{seen} "
        f"(validation perplexity {base.val_perplexity:.1f})"
    )


def _data(config: Config, corpus: dict, runs: list[RunSeed]) -> str:
    d = config.data
    vocab = corpus.get("vocab_size", d.tokenizer.vocab_size if d.tokenizer.kind == "bpe" else None)
    text = (
        f"{corpus.get('dataset', d.dataset)} ({d.source}), sequences of "
        f"{corpus.get('seq_len_tokens', d.seq_len_tokens)} tokens, {d.tokenizer.kind} tokenizer"
        + (f" (vocabulary {vocab:,})" if vocab else "")
    )
    budgets = sorted({r.settings.max_tokens for r in runs})
    if budgets:
        each = " or ".join(f"{b:,}" for b in budgets)
        text += f"; each run trains on {each} tokens"
        train = corpus.get("train_tokens")
        if isinstance(train, int) and train > 0:
            text += f" of a train split of {train:,} ({budgets[-1] / train:.2f} passes at most)"
    return text


def _device(config: Config) -> str:
    c = config.cluster
    devices = ", ".join(f"{d.name} × {d.count} ({d.kind}, {d.memory_gib:g} GiB)" for d in c.devices)
    return (
        f"{devices}; {c.nodes_per_device} node slots a device, slots "
        f"{c.slot_sharing.replace('_', ' ')}; network {c.network.bandwidth_gbit_s:g} Gbit/s, "
        f"latency {c.network.latency_s:g} s (a run may set its own slots a device)"
    )


def seed_words(seeds: dict[str, list[int]]) -> str:
    """``8 seeds: a, b; 2 seeds: c``: the runs grouped by their number of seeds."""
    counts: dict[int, list[str]] = {}
    for name, those in seeds.items():
        counts.setdefault(len(those), []).append(name)
    return "; ".join(f"{n} seed{'s' * (n != 1)}: {', '.join(names)}" for n, names in counts.items())


def about_rows(
    config: Config,
    config_path: str,
    runs: list[RunSeed],
    references: References,
    base: Base | None,
    seeds: dict[str, list[int]],
) -> list[tuple[str, str]]:
    """(subject, line) for the report's first block; ``seeds``: each run's seeds."""
    corpus = references.corpus
    trained = config.data.tokenizer.vocab_size if config.data.tokenizer.kind == "bpe" else None
    return [
        ("Model", _model(config, corpus.get("vocab_size", trained), base)),
        ("Data", _data(config, corpus, runs)),
        ("Device and network", _device(config)),
        ("Seeds", seed_words(seeds)),
        ("Code", f"{code_commit()}; configuration {config_path}"),
    ]
