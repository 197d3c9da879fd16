"""`dvc repro` with a ``data.raw_dir`` DVC cannot keep as an output.

DVC 3 keeps (caches) a stage's outputs only inside the repository, written
relative to it; for an absolute ``data.raw_dir`` its own message is
"failed to reproduce 'prepare-corpus': " with no reason. The stage's command,
run by DVC, refuses it first in one line naming the key and what to do.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from test_pipeline_wiring import DVC, make_copy, run
from test_snakemake import ROOT

from adloco.config import ConfigError, check_dvc_raw_dir, config_from_dict

PRESET = yaml.safe_load((ROOT / "config/test.yaml").read_text())


def with_raw_dir(raw_dir: str) -> dict:
    config = yaml.safe_load(yaml.safe_dump(PRESET))
    config["data"]["raw_dir"] = raw_dir
    return config


@pytest.mark.parametrize(
    ("raw_dir", "where"),
    [
        ("/srv/corpus", "an absolute path"),
        ("/repo/data/raw/test-tiny", "an absolute path"),  # inside, but DVC reads it as outside
        ("../corpus", "outside the repository"),
        ("data/../../corpus", "outside the repository"),
        ("data/raw/test-tiny", None),
        ("data/raw/../raw/test tiny", None),
    ],
)
def test_only_a_relative_raw_dir_inside_the_repository_passes(raw_dir, where):
    config = config_from_dict(with_raw_dir(raw_dir))
    if where is None:
        check_dvc_raw_dir(config, "/repo")
        return
    with pytest.raises(ConfigError) as err:
        check_dvc_raw_dir(config, "/repo")
    assert str(err.value) == (
        f"data.raw_dir: {raw_dir} is {where}; dvc.yaml's prepare-corpus stage writes it, and "
        "DVC keeps a stage's outputs only inside the repository, written relative to it: set "
        "data.raw_dir to a folder such as data/raw/test-tiny, or run the pipeline with "
        "Snakemake, which takes any folder"
    )


@pytest.mark.workflow_cli
@pytest.mark.reliability("configs")
def test_dvc_repro_with_an_absolute_raw_dir_stops_in_adlocos_one_line(tmp_path):
    outside = tmp_path / "corpus outside"
    work, env = make_copy(tmp_path, with_raw_dir(str(outside)), fake=False)
    run(["git", "init", "-q"], work, env)
    run([DVC, "init", "-q"], work, env)
    for _ in range(2):  # and again: nothing was written that would change DVC's answer
        result = subprocess.run(
            [DVC, "repro", "prepare-corpus"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        output = result.stdout + result.stderr
        assert result.returncode != 0
        lines = [line.strip() for line in output.splitlines() if "error" in line.lower()]
        assert lines[0] == (
            f"adloco prepare-corpus: error: data.raw_dir: {outside} is an absolute path; "
            "dvc.yaml's prepare-corpus stage writes it, and DVC keeps a stage's outputs only "
            "inside the repository, written relative to it: set data.raw_dir to a folder such "
            "as data/raw/test-tiny, or run the pipeline with Snakemake, which takes any folder"
        ), output
        assert "Traceback" not in output
        assert not outside.exists()
