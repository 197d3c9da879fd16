"""Shared fixtures: a tiny C4-format corpus and its tokenized folder, built once per session.

``tiny_tokenized`` is a folder in the layout of ``data/tokenized/<dataset>/``
(byte-level BPE of 300 tokens, sequences of 16 tokens), written by the same
function ``adloco tokenize`` calls; tests of later stages open it with
``adloco.data.reader.TokenData.open``.
"""

from __future__ import annotations

import os

import pytest

from c4_records import make_c4_records

TINY_DOCUMENTS = 120
TINY_SEQ_LEN_TOKENS = 16
TINY_VOCAB_SIZE = 300
TINY_VALIDATION_FRACTION = 0.2
TINY_SEED = 0


def make_data_config(**overrides):
    """The typed ``data`` section (a DataConfig, defaults filled) for the tiny corpus."""
    from adloco.config import section

    tokenizer = {"kind": "bpe", "vocab_size": TINY_VOCAB_SIZE, **overrides.pop("tokenizer", {})}
    data = {
        "dataset": "tiny",
        "source": "local",
        "seq_len_tokens": TINY_SEQ_LEN_TOKENS,
        "validation_fraction": TINY_VALIDATION_FRACTION,
        "num_proc": 1,
        "tokenizer": tokenizer,
        **overrides,
    }
    return section("data", data)


@pytest.fixture(scope="session")
def tiny_c4_records() -> list[dict]:
    return make_c4_records(TINY_DOCUMENTS)


@pytest.fixture(scope="session")
def tiny_c4_dir(tmp_path_factory, tiny_c4_records):
    """The tiny corpus as C4 ``c4-train.*.json.gz`` files (three of them)."""
    from adloco.data.corpus import write_c4_files

    folder = tmp_path_factory.mktemp("tiny-raw") / "tiny"
    write_c4_files(tiny_c4_records, folder, documents_per_file=50)
    return folder


@pytest.fixture(scope="session")
def tiny_tokenized(tmp_path_factory, tiny_c4_dir):
    """A tokenized data folder (manifest, tokenizer/, train and validation shards)."""
    from adloco.data.tokenize import tokenize_corpus

    out = tmp_path_factory.mktemp("tiny-tokenized") / "tiny"
    tokenize_corpus(make_data_config(raw_dir=str(tiny_c4_dir)), TINY_SEED, out, progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_data_config(tiny_c4_dir):
    """A factory: the tiny corpus's ``data`` section (a DataConfig), with keyword overrides."""

    def factory(**overrides):
        return make_data_config(**{"raw_dir": str(tiny_c4_dir), **overrides})

    return factory


@pytest.fixture(scope="session")
def tiny_model_cfg():
    """A Llama ``model`` section (ModelConfig) small enough for exact per-sample gradients."""
    from adloco.config import ModelConfig

    return ModelConfig(
        **{
            "source": "config",
            "name": None,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "tie_word_embeddings": True,
            "dtype": "float32",
        }
    )


def pytest_configure(config):
    """Under pytest-xdist, each process's torch gets its share of the cores.

    ``make test`` runs a process per core; torch's default of a thread per core
    in each would oversubscribe them (tests that train in-process slowed 5-10x
    under load). No figure depends on the thread count.
    """
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on a small shared machine: extra intra-op threads only oversubscribe
    the cores (no figure depends on the thread count)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ------------------------------------------------------------------ a folder turned read-only
def mount(*args: str):
    import subprocess

    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def bind_mount(tmp_path):
    """(a folder bind-mounted at another, remount(read_only)); unmounted at the end.

    Remounted read-only, the kernel refuses every write under it with ``EROFS``,
    whatever the permission bits (root too), as a disk or a network share turning
    read-only under a running job would. Skipped, saying why, where this
    container cannot mount.
    """
    import subprocess

    disk, where = tmp_path / "disk", tmp_path / "mnt"
    disk.mkdir()
    where.mkdir()
    done = mount("--bind", str(disk), str(where))
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here (not root, or no mount in this container): "
                    f"{done.stderr.strip()}")  # fmt: skip

    def remount(read_only: bool) -> None:
        done = mount("-o", f"remount,bind,{'ro' if read_only else 'rw'}", str(where))
        assert done.returncode == 0, done.stderr

    try:
        yield where, remount
    finally:
        subprocess.run(["umount", str(where)], check=False)


# ------------------------------------------------------------------ reliability cases
# `pytest -m reliability` re-runs every fault case of docs/reliability.md; the
# summary counts them by the category of their marker.
RELIABILITY = "reliability"


def pytest_collection_modifyitems(items):
    for item in items:
        marker = item.get_closest_marker(RELIABILITY)
        if marker is not None:
            item.user_properties.append((RELIABILITY, marker.args[0] if marker.args else "other"))


def pytest_collection_finish(session):
    # `pytest -m reliability --collect-only -q` counts the cases by kind, as the
    # table of docs/reliability.md does (tests/test_reliability_table.py).
    if not session.config.option.collectonly:
        return
    counts: dict[str, int] = {}
    for item in session.items:
        category = dict(item.user_properties).get(RELIABILITY)
        if category is not None:
            counts[category] = counts.get(category, 0) + 1
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if counts and reporter is not None:
        cases = ", ".join(f"{name} {count}" for name, count in sorted(counts.items()))
        reporter.write_line(f"reliability cases collected: {cases}")


def pytest_terminal_summary(terminalreporter):
    counts: dict[str, list[int]] = {}
    for outcome in ("passed", "failed", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            category = dict(getattr(report, "user_properties", ())).get(RELIABILITY)
            if category is None or (report.when != "call" and outcome != "error"):
                continue
            tally = counts.setdefault(category, [0, 0])
            tally[0] += outcome == "passed"
            tally[1] += 1
    if counts:
        cases = ", ".join(f"{name} {ok}/{total}" for name, (ok, total) in sorted(counts.items()))
        terminalreporter.write_line(f"reliability cases passed: {cases}")
