"""The report's first block: what was run, from the test preset and hand-made records."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

from adloco.config import load_config
from adloco.formats.model_size import parameter_count
from adloco.report.analysis import about
from adloco.report.analysis.about import about_rows, code_commit, seed_words
from adloco.report.inputs.references import Base, References, corpus_facts

ROOT = Path(__file__).resolve().parents[3]


def run(max_tokens: int) -> SimpleNamespace:
    return SimpleNamespace(settings=SimpleNamespace(max_tokens=max_tokens))


def test_each_line_states_the_preset_and_the_records():
    config = load_config(ROOT / "config" / "test.yaml")
    corpus = {
        "dataset": "test-tiny",
        "seq_len_tokens": 32,
        "vocab_size": 512,
        "train_tokens": 40000,
    }
    refs = References({}, {}, "none", corpus)
    base = Base(Path("b"), 180.04, {"tokens": 20032})
    rows = dict(about_rows(config, "config/test.yaml", [run(100000), run(100000), run(20000)],
                           refs, base, {"a": [0, 1], "b": [0, 1], "c": [0]}))  # fmt: skip
    count = parameter_count(config.model, 512)
    assert rows["Model"] == (
        f"Llama, 1 layers × 32 wide, {count:,} parameters (float32), continued from a base "
        "pretrained on 20,032 tokens of its own split (validation perplexity 180.0)"
    )
    # Two budgets; the larger one is 100,000 / 40,000 = 2.50 passes over the train split.
    assert rows["Data"] == (
        "test-tiny (offline-wiki), sequences of 32 tokens, bpe tokenizer (vocabulary 512); each "
        "run trains on 20,000 or 100,000 tokens of a train split of 40,000 (2.50 passes at most)"
    )
    assert rows["Device and network"].startswith(
        "cpu-tiny × 2 (cpu, 0.05 GiB); 2 node slots a device, slots concurrent; network 1 Gbit/s, "
        "latency 0.001 s"
    )
    assert rows["Seeds"] == "2 seeds: a, b; 1 seed: c"
    assert rows["Code"].endswith("; configuration config/test.yaml")


def test_without_the_base_or_the_manifest_the_lines_say_so():
    config = load_config(ROOT / "config" / "test.yaml")
    rows = dict(about_rows(config, "c.yaml", [], References.unavailable("none"), None, {}))
    assert rows["Model"].endswith("continued from a base model (not given to the report)")
    # Without a manifest the configured BPE vocabulary still counts the parameters.
    assert f"{parameter_count(config.model, 512):,} parameters" in rows["Model"]
    assert (
        rows["Data"]
        == "test-tiny (offline-wiki), sequences of 32 tokens, bpe tokenizer (vocabulary 512)"
    )


def test_the_commit_is_the_checkouts_and_outside_git_the_version_alone(tmp_path, monkeypatch):
    text = code_commit()
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                         text=True, check=True).stdout.strip()  # fmt: skip
    changes = "( with uncommitted changes to src/adloco)?"
    assert re.fullmatch(rf"adloco \S+, commit {sha[:12]} of \d{{4}}-\d\d-\d\d{changes}", text)
    monkeypatch.setattr(about, "PACKAGE_DIR", tmp_path)
    assert code_commit().endswith("(not a git checkout)")


def test_corpus_facts_read_the_manifest_and_skip_what_is_missing():
    manifest = {"dataset": "d", "seq_len_tokens": 64, "vocab_size": 300,
                "splits": {"train": {"tokens": 1234}, "validation": {"tokens": 5}}}  # fmt: skip
    assert corpus_facts(manifest) == {"dataset": "d", "seq_len_tokens": 64, "vocab_size": 300,
                                      "train_tokens": 1234}  # fmt: skip
    assert corpus_facts({"dataset": "d", "splits": "bad"}) == {"dataset": "d"}


def test_seed_words_group_runs_by_their_number_of_seeds():
    assert seed_words({"a": [0, 1, 2], "b": [5], "c": [0, 1, 2]}) == "3 seeds: a, c; 1 seed: b"
    assert seed_words({}) == ""
