"""The ``snakemake`` section: read by the workflow alone, defaulted, and checked."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from adloco.config import ConfigError, config_from_dict
from adloco.config.snakemake_section import TRAIN_JOBS, SnakemakeConfig
from adloco.stages import STAGES

ROOT = Path(__file__).resolve().parents[2]


def default() -> dict:
    return yaml.safe_load((ROOT / "config/config.yaml").read_text())


def test_a_job_per_seed_unless_the_file_asks_for_one_per_run():
    raw = default()
    assert config_from_dict(raw).snakemake == SnakemakeConfig(train_jobs="run")
    del raw["snakemake"]
    assert config_from_dict(raw).snakemake == SnakemakeConfig(train_jobs="seed")
    assert TRAIN_JOBS == ("seed", "run")


@pytest.mark.reliability("configs")
@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"train_jobs": "seeds"}, "snakemake.train_jobs"),
        ({"train_jobs": None}, "snakemake.train_jobs"),
        ({"jobs": "run"}, "snakemake"),
    ],
)
def test_a_bad_snakemake_section_is_refused_naming_the_key(section, named):
    raw = copy.deepcopy(default())
    raw["snakemake"] = section
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    assert named in str(err.value)


def test_no_stage_reads_the_section():
    # It changes no result: no stage's configuration keys (Snakemake's params,
    # DVC's params) name it, so switching it re-runs nothing for its settings.
    assert not [k.name for s in STAGES for k in s.keys if k.name.startswith("snakemake")]
