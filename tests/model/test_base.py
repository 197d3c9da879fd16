"""The start model: a base experiment's runs start from exactly the verified base model."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml

from adloco import cli, train_run
from adloco.config import ConfigError, config_from_dict, validate
from adloco.core import paths
from adloco.data.tokenize import tokenize_corpus
from adloco.engine import checkpoint
from adloco.engine.collective import LocalCollective
from adloco.engine.compose import build_engine
from adloco.engine.spec import EngineSpec
from adloco.formats.clock import StepTimeCurve
from adloco.model import base as base_model
from adloco.model.base import DATA_KEY, StartModel, model_digests, start_model
from adloco.model.llama import build_model

# The engine tests' tiny model and token splits (tests/engine/array_data.py).
sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
from array_data import TINY_MODEL, ArraySplit  # noqa: E402

VOCAB, SEQ = 64, 12
REPO = Path(__file__).parents[2]


class Tokens:
    """Random sequences with the reader's API: train and validation splits."""

    vocab_size, seq_len_tokens = VOCAB, SEQ
    manifest = {"splits": {"train": {"sequences": 40}, "validation": {"sequences": 8}}}

    def __init__(self):
        tokens = torch.randint(0, VOCAB, (48, SEQ), generator=torch.Generator().manual_seed(1))
        self.splits = {"train": ArraySplit(tokens[:40]), "validation": ArraySplit(tokens[40:])}

    def split(self, name: str):
        return self.splits[name]


def write_base(folder: Path, model_cfg) -> torch.nn.Module:
    """A base folder as ``adloco pretrain`` leaves it: model/ and base.json with its sha256."""
    model = build_model(model_cfg, VOCAB, SEQ, seed=5)
    model.save_pretrained(folder / base_model.MODEL_DIR, safe_serialization=True)
    digests = model_digests(folder / base_model.MODEL_DIR)
    summary = {"model_dir": base_model.MODEL_DIR, "model_sha256": digests}
    paths.base_summary_file(folder).write_text(json.dumps(summary))
    return model


@pytest.fixture()
def base(tmp_path, tiny_model_cfg):
    folder = tmp_path / "base"
    model = write_base(folder, tiny_model_cfg)
    return folder, model, dataclasses.replace(tiny_model_cfg, source="base")


def test_a_model_of_another_source_is_returned_unchanged(tiny_model_cfg, tmp_path):
    assert start_model(tiny_model_cfg, tmp_path / "nowhere") == StartModel(tiny_model_cfg, None)
    assert start_model(tiny_model_cfg, None).base_sha256 is None


def test_a_run_from_the_base_starts_from_exactly_its_weights(base, tmp_path):
    folder, saved, model_cfg = base
    start = start_model(model_cfg, folder)
    assert start.model == dataclasses.replace(
        model_cfg, source="pretrained", name=str(folder / "model")
    )
    assert start.base_sha256 == model_digests(folder / "model")
    assert sorted(start.base_sha256) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
    ]
    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    config = config_from_dict({**raw, "model": TINY_MODEL})
    batches = {d.name: 4 for d in config.cluster.devices}
    curves = {d.name: StepTimeCurve.roofline(0.01, 4) for d in config.cluster.devices}
    spec = EngineSpec(
        settings=config.run("diloco"), seed=9, data=Tokens(), model=start.model,
        cluster=config.cluster, max_batches=batches, curves=curves,
        checkpoint_dir=tmp_path / "ckpt", base_sha256=start.base_sha256, progress=False,
    )  # fmt: skip
    engine = build_engine(spec)
    worker = list(engine.loop.worker.model.parameters())
    assert len(worker) == len(list(saved.parameters())) > 0
    for p, q in zip(worker, saved.parameters(), strict=True):
        assert torch.equal(p.cpu(), q)


def test_a_changed_missing_or_extra_file_is_refused(base):
    folder, _, model_cfg = base
    summary_path = paths.base_summary_file(folder)
    summary = json.loads(summary_path.read_text())
    good = dict(summary["model_sha256"])
    # A wrong checksum in base.json: the weights no longer match it.
    summary["model_sha256"]["model.safetensors"] = "0" * 64
    summary_path.write_text(json.dumps(summary))
    with pytest.raises(ValueError, match=r"model.safetensors: changed since adloco pretrain"):
        start_model(model_cfg, folder)
    summary["model_sha256"] = {**good, "tokenizer.json": "1" * 64}
    summary_path.write_text(json.dumps(summary))
    with pytest.raises(ValueError, match=r"tokenizer.json: missing since"):
        start_model(model_cfg, folder)
    summary["model_sha256"] = good
    summary_path.write_text(json.dumps(summary))
    (folder / "model" / "notes.txt").write_text("added")
    with pytest.raises(ValueError, match=r"notes.txt: extra since"):
        start_model(model_cfg, folder)
    with pytest.raises(FileNotFoundError, match="run adloco pretrain first"):
        start_model(model_cfg, folder / "model")
    with pytest.raises(ConfigError, match="--base"):
        start_model(model_cfg, None)


def test_the_fingerprint_holds_the_resolved_model_and_its_checksums(base, tmp_path, monkeypatch):
    # What a checkpoint was fingerprinted under before the engine took typed sections:
    # the validated dict's model section resolved to the base (checksums as "base") and
    # its cluster section without processes_per_machine. Kept, so checkpoints still resume.
    folder, _, _ = base
    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    raw["model"] = {**TINY_MODEL, "source": "base"}
    raw["pretrain"] = {}
    raw["data"]["base_fraction"] = 0.2
    raw["runs"]["adloco"]["inner_lr"] = 0.002
    validated = validate(copy.deepcopy(raw))
    config = config_from_dict(raw)
    start = start_model(config.model, folder)
    seen = []
    monkeypatch.setattr(checkpoint, "fingerprint", lambda s: seen.append(s) or "print")
    monkeypatch.setattr(train_run, "step_time_curves", lambda cluster, _dir: {})
    request = train_run.TrainRequest(
        config="config.yaml", run="adloco", seed=0, data="data", calibration=tmp_path,
        out=tmp_path / "out", checkpoints=tmp_path / "ckpt", progress=False,
    )  # fmt: skip
    batches = {d.name: 4 for d in config.cluster.devices}
    spec = train_run.engine_spec(
        config, start, Tokens(), batches, request, 0, tmp_path / "ckpt",
        device=torch.device("cpu"), collective=LocalCollective(), resume_finished=False,
    )  # fmt: skip
    engine = build_engine(spec)
    digests = model_digests(folder / "model")
    old_model = {**validated["model"], "source": "pretrained", "name": str(folder / "model")}
    assert seen[-1]["model"] == {**old_model, "base": digests}
    cluster = {k: v for k, v in validated["cluster"].items() if k != "processes_per_machine"}
    assert dump(seen[-1]["cluster"]) == dump(cluster)
    assert seen[-1]["max_batches"] == batches and seen[-1]["seed"] == 0
    # Where the lr settings are written, for the message of a diverged round.
    assert engine.loop.lr_keys == ("runs.adloco.inner_lr", "train.outer_lr")


def dump(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# ------------------------------------------------------- a base made for another configuration
def preset_base(folder: Path, raw: dict) -> None:
    """A base as ``adloco pretrain`` of the preset ``raw`` writes it: shape, seed, settings."""
    config = config_from_dict(copy.deepcopy(raw))
    seq_len = config.data.seq_len_tokens
    model = build_model(dataclasses.replace(config.model, source="config"), VOCAB, seq_len, 5)
    model.save_pretrained(folder / base_model.MODEL_DIR, safe_serialization=True)
    settings = {**dataclasses.asdict(config.pretrain), "betas": list(config.pretrain.betas)}
    summary = {
        "model_dir": base_model.MODEL_DIR,
        "model_sha256": model_digests(folder / base_model.MODEL_DIR),
        "seed": config.seed,
        "settings": settings,
    }
    paths.base_summary_file(folder).write_text(json.dumps(summary))


def _recorded(key: str, value):
    """base.json records ``value`` under ``key`` of its settings (not checksummed)."""

    def edit(summary: dict) -> None:
        summary["settings"][key] = value

    return edit


def _config(section: str, key: str, value):
    def edit(raw: dict) -> None:
        raw[section][key] = value

    return edit


# (case, change to base.json, change to the config, key, recorded, the config's)
MISMATCHED_BASES = [
    ("max_tokens", _recorded("max_tokens", 80000), None, "pretrain.max_tokens", 80000, 20000),
    ("lr", _recorded("lr", 0.01), None, "pretrain.lr", 0.01, 0.003),
    ("betas", _recorded("betas", [0.9, 0.99]), None, "pretrain.betas", [0.9, 0.99], [0.9, 0.95]),
    ("seed", lambda s: s.update(seed=7), None, "seed", 7, 0),
    ("hidden_size", None, _config("model", "hidden_size", 64), "model.hidden_size", 32, 64),
    ("layers", None, _config("model", "num_hidden_layers", 2), "model.num_hidden_layers", 1, 2),
    ("dtype", None, _config("model", "dtype", "bfloat16"), "model.dtype", "float32", "bfloat16"),
    ("seq_len", None, _config("data", "seq_len_tokens", 64), "data.seq_len_tokens", 32, 64),
]


@pytest.fixture
def preset(tmp_path):
    """The test preset (``model.source: base``) and a base made for it."""
    raw = yaml.safe_load((REPO / "config" / "test.yaml").read_text())
    preset_base(tmp_path / "base", raw)
    return raw, tmp_path / "base"


def test_a_base_made_for_the_config_is_accepted(preset):
    raw, folder = preset
    config = config_from_dict(raw)
    start = start_model(config.model, folder, config)
    assert start.model.name == str(folder / "model") and start.base_sha256


@pytest.mark.reliability("inputs")
@pytest.mark.parametrize(
    ("case", "summary_edit", "config_edit", "key", "recorded", "wanted"),
    MISMATCHED_BASES,
    ids=[c[0] for c in MISMATCHED_BASES],
)
def test_train_refuses_a_base_made_for_another_config_in_one_line(
    preset, tmp_path, capsys, case, summary_edit, config_edit, key, recorded, wanted
):
    raw, folder = preset
    summary_path = paths.base_summary_file(folder)
    if summary_edit:
        summary = json.loads(summary_path.read_text())
        summary_edit(summary)
        summary_path.write_text(json.dumps(summary))
    if config_edit:
        config_edit(raw)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    args = ["train", "--config", str(config), "--run", "diloco", "--seed", "0"]
    args += ["--data", str(tmp_path / "no-data"), "--calibration", str(tmp_path / "no-cal")]
    args += ["--base", str(folder), "--out", str(tmp_path / "out")]
    args += ["--checkpoints", str(tmp_path / "ckpt")]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"adloco train: error: {summary_path} ("), err
    assert f"pretrained with {key} {recorded!r}, the config says {wanted!r}" in err, err
    assert "run adloco pretrain with this config, or point --base" in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "ckpt").exists()


@pytest.mark.reliability("inputs")
def test_variance_refuses_a_base_made_for_another_config(preset, tiny_tokenized, tmp_path, capsys):
    raw, folder = preset
    raw["pretrain"]["max_tokens"] = 40000
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    args = ["variance", "--config", str(config), "--data", str(tiny_tokenized)]
    assert cli.main([*args, "--base", str(folder), "--out", str(tmp_path / "variance")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"adloco variance: error: {paths.base_summary_file(folder)} ("), err
    assert "pretrain.max_tokens 20000, the config says 40000" in err and err.count("\n") == 1
    assert not (tmp_path / "variance").exists()


# ------------------------------------------------------- a base pretrained on other data
ENGINE_FIXTURE = Path(__file__).parents[1] / "report" / "fixtures" / "engine"


@pytest.fixture(scope="module")
def two_tokenizations(tmp_path_factory, tiny_data_config):
    """The tiny corpus tokenized twice, its BPE trained on two seeds' train splits.

    Two tokenizers of the same vocabulary size and sequence length: the model's
    shape cannot tell a base pretrained on one from a base pretrained on the other.
    """
    root = tmp_path_factory.mktemp("two-tokenizations")
    for name, seed in (("mine", 0), ("other", 1)):
        tokenize_corpus(tiny_data_config(), seed, root / name, progress=False)
    return root / "mine", root / "other"


def manifest_sha256(data: Path) -> str:
    return hashlib.sha256((data / "manifest.json").read_bytes()).hexdigest()


def edit_summary(folder: Path, **changes) -> None:
    """base.json of ``folder`` with keys set (a value of None: the key removed)."""
    path = paths.base_summary_file(folder)
    summary = json.loads(path.read_text())
    summary.update(changes)
    path.write_text(json.dumps({k: v for k, v in summary.items() if v is not None}))


@pytest.fixture
def pretrained_on_mine(preset, two_tokenizations):
    """The test preset, its base recorded as pretrained on ``mine``; both data folders."""
    raw, folder = preset
    mine, other = two_tokenizations
    edit_summary(folder, **{DATA_KEY: manifest_sha256(mine)})
    return raw, folder, mine, other


def test_a_base_is_accepted_on_its_data_and_refused_on_another_tokenizers(pretrained_on_mine):
    raw, folder, mine, other = pretrained_on_mine
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (mine, other)]
    # Same vocabulary size and sequence length, another tokenizer.
    assert [(m["vocab_size"], m["seq_len_tokens"]) for m in manifests] == [(300, 16)] * 2
    tokenizers = [(d / "tokenizer" / "tokenizer.json").read_bytes() for d in (mine, other)]
    assert tokenizers[0] != tokenizers[1]
    config = config_from_dict(raw)
    assert start_model(config.model, folder, config, mine).base_sha256
    with pytest.raises(ValueError) as refused:
        start_model(config.model, folder, config, other)
    assert str(refused.value) == (
        f"{folder / 'base.json'}: the base was pretrained on data with {DATA_KEY} "
        f"{manifest_sha256(mine)!r}, --data {other} has {manifest_sha256(other)!r} (the sha256 "
        "of its manifest.json): it was pretrained on other data (another tokenizer or corpus); "
        "run adloco pretrain again on this data, or point --base and --data at a base and the "
        "data it was pretrained on"
    )
    # Written before base.json recorded its data: it cannot be checked.
    edit_summary(folder, **{DATA_KEY: None})
    with pytest.raises(ValueError, match=f"has no {DATA_KEY} .* run adloco pretrain again on"):
        start_model(config.model, folder, config, mine)


def stage_args(stage: str, raw: dict, folder: Path, data: Path, tmp_path: Path) -> list[str]:
    """``adloco <stage>`` from the base ``folder`` on ``data``, writing under ``tmp_path``."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    out = ["--base", str(folder), "--data", str(data), "--out", str(tmp_path / "out")]
    if stage == "train":
        args = ["--config", str(config), "--run", "diloco", "--seed", "0"]
        return [*args, "--calibration", str(tmp_path / "no-cal"), *out,
                "--checkpoints", str(tmp_path / "ckpt")]  # fmt: skip
    if stage == "variance":
        return ["--config", str(config), *out]
    f = ENGINE_FIXTURE  # the report: the engine fixture's runs, from this base and data
    return ["--config", str(f / "config.yaml"), "--runs", str(f / "runs"), "--calibration",
            str(f / "calibration"), "--variance", str(f / "variance"), *out]  # fmt: skip


@pytest.mark.reliability("inputs")
@pytest.mark.parametrize(
    "stage, recorded",
    [("train", "other"), ("variance", "other"), ("report", "other"), ("train", "none"),
     ("report", "none")],
)  # fmt: skip
def test_every_stage_refuses_a_base_pretrained_on_other_data_in_one_line(
    pretrained_on_mine, tmp_path, capsys, stage, recorded
):
    raw, folder, mine, other = pretrained_on_mine
    if recorded == "none":  # a base.json written before it recorded its data
        edit_summary(folder, **{DATA_KEY: None})
    data = other if recorded == "other" else mine
    assert cli.main([stage, *stage_args(stage, raw, folder, data, tmp_path)]) == 1
    err = capsys.readouterr().err
    summary = paths.base_summary_file(folder)
    assert err.count("\n") == 1 and err.startswith(f"adloco {stage}: error: {summary}: "), err
    if recorded == "other":
        assert f"{DATA_KEY} {manifest_sha256(mine)!r}, --data {other} has " in err, err
        assert f"{manifest_sha256(other)!r}" in err, err
        assert "run adloco pretrain again on this data, or point --base and --data at" in err
    else:
        assert f"has no {DATA_KEY} (written before base.json recorded the data" in err, err
        assert err.rstrip().endswith("run adloco pretrain again on this data"), err
    assert not (tmp_path / "out").exists() and not (tmp_path / "ckpt").exists()


@pytest.mark.reliability("messages")
@pytest.mark.parametrize("stage", ["train", "variance", "report"])
def test_a_damaged_manifest_is_named_as_damaged_not_as_other_data(
    pretrained_on_mine, tmp_path, capsys, stage
):
    # Issue 45: a manifest.json holding `{` was "the base was pretrained on other data".
    raw, folder, mine, _ = pretrained_on_mine
    data = tmp_path / "data"
    shutil.copytree(mine, data)
    (data / "manifest.json").write_text("{")
    assert cli.main([stage, *stage_args(stage, raw, folder, data, tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "other data" not in err, err
    assert err.startswith(f"adloco {stage}: error: {data / 'manifest.json'}: not valid JSON ("), err
    # The report reads the manifest first, with the fix of any adloco output.
    fix = {"report": "write it again with the adloco stage that made it"}
    assert err.rstrip().endswith(
        fix.get(stage, "is damaged; run adloco tokenize again, which writes it whole")
    ), err
    assert (data / "manifest.json").read_text() == "{"
    assert not (tmp_path / "out").exists() and not (tmp_path / "ckpt").exists()


# ------------------------------------------------------- a base.json edited by hand
HAND_EDITED = [
    ("not JSON", "{'model_dir': 'model'}", "not valid JSON ("),
    ("no model_sha256", {"model_sha256": None}, "has no key 'model_sha256'; run adloco pretrain "
     "again"),
    ("no model_dir", {"model_dir": None}, "has no key 'model_dir'; run adloco pretrain again"),
    ("model_dir null", '{"model_dir": null, "note": "model.source is config: no base"}',
     "records no base model (model_dir is null: the config it was written with has a "
     "model.source other than base); run adloco pretrain with this config"),
    ("model_dir a number", {"model_dir": 3}, "model_dir is an integer, adloco pretrain writes "
     "text; run adloco pretrain again"),
    ("checksums a list", {"model_sha256": ["a"]}, "model_sha256 is a list, adloco pretrain "
     "writes an object; run adloco pretrain again"),
    ("a checksum a number", {"model_sha256": {"config.json": 5}}, "model_sha256['config.json'] "
     "is an integer, adloco pretrain writes a sha256 as text; run adloco pretrain again"),
    ("seed as text", {"seed": "0"}, "seed is text, adloco pretrain writes an integer; run "
     "adloco pretrain again"),
    ("settings a list", {"settings": []}, "settings is a list, adloco pretrain writes an "
     "object; run adloco pretrain again"),
    ("data a boolean", {DATA_KEY: True}, f"{DATA_KEY} is a boolean, adloco pretrain writes "
     "text; run adloco pretrain again"),
    # Issue 45: train walked and hashed /etc before the checksums refused it.
    ("model_dir /etc", {"model_dir": "/etc"}, "model_dir '/etc' is not a folder inside "),
    ("model_dir ../..", {"model_dir": "../../../../../etc"}, "model_dir '../../../../../etc' is "
     "not a folder inside "),
]  # fmt: skip


@pytest.mark.reliability("messages")
@pytest.mark.parametrize("model_dir", ["/etc", "../../../../../etc", "link"])
def test_a_model_dir_outside_the_base_is_refused_before_any_file_is_read(
    pretrained_on_mine, tmp_path, capsys, monkeypatch, model_dir
):
    import adloco.model.base as base_module

    raw, folder, mine, _ = pretrained_on_mine
    if model_dir == "link":  # a link in the base folder to a folder outside it
        (folder / "link").symlink_to("/etc")
    edit_summary(folder, model_dir=model_dir)
    read = []
    monkeypatch.setattr(base_module, "model_digests", lambda f: read.append(f) or {})
    assert cli.main(["train", *stage_args("train", raw, folder, mine, tmp_path)]) == 1
    err = capsys.readouterr().err
    summary = paths.base_summary_file(folder)
    assert err == (
        f"adloco train: error: {summary}: model_dir {model_dir!r} is not a folder inside "
        f"{folder} (adloco pretrain writes 'model'); run adloco pretrain again\n"
    )
    assert read == [] and not (tmp_path / "out").exists()


@pytest.mark.reliability("messages")
@pytest.mark.parametrize("case, edit, message", HAND_EDITED, ids=[c[0] for c in HAND_EDITED])
def test_a_hand_edited_base_json_is_one_line_naming_it_and_the_key(
    pretrained_on_mine, tmp_path, capsys, case, edit, message
):
    raw, folder, mine, _ = pretrained_on_mine
    summary = paths.base_summary_file(folder)
    if isinstance(edit, str):  # the whole file
        summary.write_text(edit)
    else:
        edit_summary(folder, **edit)
    for stage in ("train", "variance"):
        assert cli.main([stage, *stage_args(stage, raw, folder, mine, tmp_path)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"adloco {stage}: error: {summary}: {message}"), err
        assert not (tmp_path / "out").exists() and not (tmp_path / "ckpt").exists()
