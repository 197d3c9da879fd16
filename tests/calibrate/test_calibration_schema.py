"""The schema's calibration settings: step_time blocks, slot sharing, timing, their defaults."""

from __future__ import annotations

import pytest
import yaml
from calibrate_helpers import REPO, TEST_CONFIG

from adloco.config import ConfigError, config_from_dict, load_config, thaw, validate

BAD_STEP_TIME = [
    ("step_time", {"model": "linear"}, "cluster.devices.0.step_time.model"),
    ("step_time", {"saturation_batch": 0}, "cluster.devices.0.step_time.saturation_batch"),
    ("step_time", {"saturation_batch": 2.5}, "cluster.devices.0.step_time.saturation_batch"),
    ("step_time", {"update_s": -1.0}, "cluster.devices.0.step_time.update_s"),
    ("step_time", {"scale": 0}, "cluster.devices.0.step_time.scale"),
    ("step_time", {"speed": 1.0}, "cluster.devices.0.step_time.speed"),
    ("step_time", "roofline", "cluster.devices.0.step_time"),
]


@pytest.mark.parametrize(("key", "value", "named"), BAD_STEP_TIME)
def test_schema_rejects_bad_step_time_naming_the_key(key, value, named):
    raw = yaml.safe_load(TEST_CONFIG.read_text())
    raw["cluster"]["devices"][0][key] = value
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        validate(raw)


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("cluster", "slot_sharing", "sequential"),
        ("calibration", "timing_repeats", 4),
        ("calibration", "timing_warmup", 0),
    ],
)
def test_schema_rejects_bad_sharing_and_timing_settings(section, key, value):
    raw = yaml.safe_load(TEST_CONFIG.read_text())
    raw[section][key] = value
    with pytest.raises(ConfigError, match=f"{section}\\.{key}"):
        validate(raw)


def test_schema_defaults_of_step_time_and_sharing():
    raw = yaml.safe_load(TEST_CONFIG.read_text())
    del raw["cluster"]["slot_sharing"], raw["cluster"]["devices"][0]["step_time"]
    del raw["calibration"]["timing_repeats"], raw["calibration"]["timing_warmup"]
    cfg = config_from_dict(raw)
    assert cfg.cluster.slot_sharing == "concurrent"
    assert thaw(cfg.cluster.devices[0].step_time) == {
        "model": "roofline",
        "saturation_batch": 8,
        "update_s": 0.0,
        "scale": 1.0,
        "record": None,
    }
    assert (cfg.calibration.timing_repeats, cfg.calibration.timing_warmup) == (5, 2)
    shipped = {n: load_config(REPO / "config" / f"{n}.yaml") for n in ("config", "test", "paper")}
    models = {n: c.cluster.devices[0].step_time.model for n, c in shipped.items()}
    assert models == {"config": "measured_record", "test": "roofline", "paper": "measured"}
