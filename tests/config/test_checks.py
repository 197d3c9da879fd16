"""Rules between fields: each refused at load naming the key to change, or (subset) at train."""

from __future__ import annotations

import dataclasses

import pytest

from adloco.config import ConfigError, check_subset_fraction, config_from_dict, validate
from adloco.core import paths
from adloco.formats import model_size
from config_edits import base


def test_a_merge_count_above_the_trainers_is_accepted(tmp_path):
    # A merge of more trainers than are left merges them all (select_for_merge), and one
    # trainer has nothing to merge (the multi-instance ablation changes initial_trainers
    # alone): neither is refused.
    from adloco.algo.merge import select_for_merge

    cfg = base()
    cfg["train"]["merge_count"] = 5
    cfg["runs"]["adloco"]["merge_count"] = 3
    validate(cfg)
    assert select_for_merge({0: 4, 1: 2}, 3) == [1, 0]
    cfg["runs"]["adloco"]["initial_trainers"] = 1
    validate(cfg)
    assert select_for_merge({0: 4}, 2) == []


@pytest.mark.parametrize(
    ("run", "named"),
    [
        ({"stats_microbatches": 1, "stats_steps": 1}, "one group per statistics block"),
        ({"stats_reduce": "vector", "stats_steps": 2}, "stats_steps 1 and stats_blocks first"),
        ({"stats_reduce": "vector", "stats_blocks": "all"}, "stats_steps 1 and stats_blocks first"),
    ],
)
def test_statistics_blocks_the_test_cannot_read_are_refused(run, named):
    cfg = base()
    cfg["runs"]["adloco"].update(run)
    with pytest.raises(ConfigError, match=named):
        validate(cfg)
    # A run without a batch test may have them.
    cfg["runs"]["adloco"]["batch_test"] = "none"
    validate(cfg)


def test_two_devices_with_one_name_are_refused():
    cfg = base()
    device = cfg["cluster"]["devices"][0]
    cfg["cluster"]["devices"] = [device, {**device, "count": 1}]
    with pytest.raises(ConfigError, match=r"cluster\.devices\.1\.name: 'cpu-tiny' is also") as err:
        validate(cfg)
    # The file the name would collide on, where adloco.core.paths puts it.
    assert str(paths.calibration_file(cfg["experiment"], "<name>")) in str(err.value)


def test_more_processes_than_devices_are_refused():
    cfg = base()  # 2 devices
    cfg["cluster"]["processes_per_machine"] = 2
    validate(cfg)
    cfg["cluster"]["processes_per_machine"] = 3
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert str(err.value) == (
        "cluster.processes_per_machine: 3 processes for 2 devices; "
        "every process needs at least one device"
    )


def test_a_subset_leaving_a_trainer_less_than_a_batch_is_refused_naming_the_key():
    raw = base()
    cfg = config_from_dict(raw)
    run = cfg.run("adloco")  # 2 trainers on 4 slots, initial_batch 2: batches of 4
    check_subset_fraction(cfg, run, train_sequences=40, initial_local_batch=2)  # 40 x 0.1 = 4
    run = dataclasses.replace(run, subset_fraction=0.05)
    with pytest.raises(ConfigError) as err:
        check_subset_fraction(cfg, run, train_sequences=40, initial_local_batch=2)
    message = str(err.value)
    assert message.startswith("train.subset_fraction: 0.05 of the 40 train sequences")
    assert "2 sequences per trainer" in message and "batch of 4" in message
    raw["runs"]["adloco"]["subset_fraction"] = 0.05
    with pytest.raises(ConfigError, match=r"^runs\.adloco\.subset_fraction"):
        check_subset_fraction(config_from_dict(raw), run, train_sequences=40, initial_local_batch=2)


def test_a_subset_of_exactly_the_first_batch_passes_and_one_less_is_refused():
    cfg = config_from_dict(base())  # 2 devices x 2 node slots = 4 slots
    run = dataclasses.replace(cfg.run("adloco"), subset_fraction=0.5)  # 2 trainers, 2 slots each
    # First batch: 3 per slot x 2 slots = 6; the subset is round(n x 0.5).
    check_subset_fraction(cfg, run, train_sequences=12, initial_local_batch=3)  # 6: exactly
    check_subset_fraction(cfg, run, train_sequences=11, initial_local_batch=3)  # round(5.5) = 6
    with pytest.raises(ConfigError) as err:
        check_subset_fraction(cfg, run, train_sequences=10, initial_local_batch=3)  # 5
    assert str(err.value) == (
        "train.subset_fraction: 0.5 of the 10 train sequences leaves 5 sequences per trainer, "
        "fewer than run adloco's first batch of 6 (3 per node slot x 2 slots); "
        "raise it to at least 0.6 or lower the batch"
    )


@pytest.mark.reliability("configs")
def test_a_first_batch_larger_than_the_whole_split_asks_for_a_smaller_batch():
    # No subset_fraction (at most 1) can give 400000 sequences from 1373: the advice is
    # a batch of at most floor(1373 / 4 slots) = 343 per slot, which fits exactly.
    cfg = config_from_dict(base())  # 4 slots
    run = dataclasses.replace(cfg.run("diloco"), subset_fraction=1.0)  # 1 trainer, 4 slots
    with pytest.raises(ConfigError) as err:
        check_subset_fraction(cfg, run, train_sequences=1373, initial_local_batch=100000)
    assert str(err.value) == (
        "train.subset_fraction: 1.0 of the 1373 train sequences leaves 1373 sequences per "
        "trainer, fewer than run diloco's first batch of 400000 (100000 per node slot x 4 "
        "slots); even the whole train split is smaller than that batch: lower "
        "train.initial_batch to at most 343 sequences per node slot, or tokenize more "
        "documents (data.max_documents)"
    )
    check_subset_fraction(cfg, run, train_sequences=1373, initial_local_batch=343)
    with pytest.raises(ConfigError):
        check_subset_fraction(cfg, run, train_sequences=1373, initial_local_batch=344)


@pytest.mark.parametrize(
    ("sequences", "local_batch", "advised"),
    # The first batch (4 slots x local_batch) over the split, rounded up to 3 significant
    # digits: 8/11 = 0.72727 -> 0.728; 123456/1e6 = 0.123456 -> 0.124, where 0.123
    # would leave 123000 sequences, fewer than the batch.
    [(11, 2, "0.728"), (1_000_000, 30_864, "0.124"), (10, 1, "0.4")],
)
def test_the_advised_subset_fraction_is_rounded_up_and_suffices(sequences, local_batch, advised):
    cfg = config_from_dict(base())
    run = dataclasses.replace(cfg.run("diloco"), subset_fraction=0.01)  # 1 trainer, 4 slots
    with pytest.raises(ConfigError) as err:
        check_subset_fraction(cfg, run, sequences, local_batch)
    assert str(err.value).endswith(f"; raise it to at least {advised} or lower the batch")
    followed = dataclasses.replace(run, subset_fraction=float(advised))
    check_subset_fraction(cfg, followed, sequences, local_batch)


def test_a_trainer_takes_the_larger_share_of_slots_that_do_not_divide():
    cfg = config_from_dict(base())  # 4 slots
    run = dataclasses.replace(cfg.run("adloco"), initial_trainers=3, subset_fraction=0.1)
    # ceil(4 / 3) = 2 slots x 1 per slot: a batch of 2; the subset is max(1, round(n x 0.1)).
    check_subset_fraction(cfg, run, train_sequences=15, initial_local_batch=1)  # round(1.5) = 2
    with pytest.raises(ConfigError, match=r"leaves 1 sequences per trainer, fewer than .* of 2 "):
        check_subset_fraction(cfg, run, train_sequences=14, initial_local_batch=1)
    with pytest.raises(ConfigError, match=r"leaves 1 sequences per trainer"):
        check_subset_fraction(cfg, run, train_sequences=2, initial_local_batch=1)  # max(1, 0)


def test_a_model_whose_training_state_exceeds_a_node_slot_is_refused():
    raw = base()  # hidden 32, 1 layer, vocabulary 512, float32, 2 slots per device
    model = config_from_dict(raw).model
    params = model_size.parameter_count(model, 512)
    need = params * 4 * 4  # float32 weights, gradients and two AdamW moments
    # Exactly the training state per slot fits; a byte's worth less (in GiB) does not.
    raw["cluster"]["devices"][0]["memory_gib"] = 2 * need / model_size.GIB
    validate(raw)
    raw["cluster"]["devices"][0]["memory_gib"] = 2 * (need - 1) / model_size.GIB
    with pytest.raises(ConfigError) as err:
        validate(raw)
    message = str(err.value)
    assert message.startswith(f"model: {params:,} parameters (hidden_size 32, 1 layers) need ")
    assert "a node slot of cluster.devices.0 (cpu-tiny)" in message
    # A pretrained model's size is unknown before it loads: not checked.
    raw["model"] = {"source": "pretrained", "name": "some/model"}
    del raw["pretrain"]
    validate(raw)


def test_a_run_with_its_own_node_slots_trains_on_them_and_keeps_its_batch():
    raw = base()  # 2 devices x 2 node slots
    raw["runs"]["wide"] = {"method": "diloco", "nodes_per_device": 8, "initial_batch": 1}
    cfg = config_from_dict(raw)
    run = cfg.run("wide")
    assert cfg.cluster.for_run(run).slots() == 16 and cfg.cluster.slots() == 4
    assert cfg.cluster.for_run(cfg.run("adloco")) is cfg.cluster
    # Its first batch is 16 slots x 1: a subset of 15 sequences is refused.
    check_subset_fraction(cfg, dataclasses.replace(run, subset_fraction=0.5), 32, 1)
    with pytest.raises(ConfigError, match=r"fewer than run wide's first batch of 16 \(1 per node"):
        check_subset_fraction(cfg, dataclasses.replace(run, subset_fraction=0.5), 30, 1)
    # Its slots share a device eight ways: the training state must fit memory / 8.
    model = cfg.model
    need = model_size.parameter_count(model, 512) * 4 * 4
    raw["cluster"]["devices"][0]["memory_gib"] = 8 * need / model_size.GIB
    validate(raw)
    raw["cluster"]["devices"][0]["memory_gib"] = 8 * (need - 1) / model_size.GIB
    with pytest.raises(ConfigError, match=r"/ 8 slots"):
        validate(raw)


@pytest.mark.parametrize(
    "setting, value",
    [("batch_test", "norm"), ("merge", "smallest_batch"), ("initial_batch", "max_batch")],
)
def test_a_run_with_its_own_node_slots_and_a_changing_batch_is_refused(setting, value):
    raw = base()
    method = "diloco" if setting == "initial_batch" else "adloco"
    run = {"method": method, "nodes_per_device": 4, setting: value}
    if method == "adloco":  # only the setting under test varies the batch
        run.update({k: "none" for k in ("batch_test", "merge") if k != setting})
        run.setdefault("initial_trainers", 2)
    raw["runs"]["wide"] = run
    with pytest.raises(ConfigError) as err:
        validate(raw)
    assert str(err.value).startswith("runs.wide.nodes_per_device: run wide sets its own node slots")
    assert f"but {setting} is {value!r}" in str(err.value)
