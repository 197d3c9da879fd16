"""`adloco train`'s command line as a typed request: every flag lands in its field, and the
command line a seed's model card quotes parses back to the request of that one seed."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from adloco import cli, train_run
from adloco.stages import train as train_stage
from adloco.train_run import TrainRequest, seed_command, seed_live_dir, seeds_to_train


def requested(argv: list[str], monkeypatch) -> TrainRequest:
    """The request the train stage hands its library for ``adloco <argv>`` (nothing trained)."""
    seen = []
    monkeypatch.setattr(train_run, "train", lambda request: seen.append(request) or 0)
    args = cli.build_parser().parse_args(argv)
    assert train_stage.run(args) == 0
    (request,) = seen
    return request


def test_every_flag_lands_in_its_field(monkeypatch):
    argv = ["train", "--config", "./c.yaml", "--run-name", "adloco", "--seed", "all"]
    argv += ["--data", "d/", "--calibration", "cal", "--base", "b", "--out", "o"]
    argv += ["--checkpoints", "k", "--live", "l", "--no-progress", "--threads", "3"]
    argv += ["--dist-timeout-s", "2.5"]
    assert requested(argv, monkeypatch) == TrainRequest(
        config="./c.yaml", run="adloco", seed="all", data="d/", calibration="cal", out="o",
        checkpoints="k", base="b", live="l", progress=False, dist_timeout_s=2.5,
    )  # fmt: skip
    # The defaults of the optional flags are the request's.
    short = ["train", "--config", "c", "--run", "r", "--seed", "4", "--data", "d"]
    short += ["--calibration", "cal", "--out", "o", "--checkpoints", "k"]
    assert requested(short, monkeypatch) == TrainRequest(
        config="c", run="r", seed=4, data="d", calibration="cal", out="o", checkpoints="k"
    )


def test_a_seeds_command_line_is_the_request_of_that_seed_alone(monkeypatch):
    request = TrainRequest(
        config="./c.yaml", run="adloco", seed="all", data="d/", calibration="cal", out="o",
        checkpoints="k", base="b", live="l", progress=False,
    )  # fmt: skip
    out, ckpt = Path("o") / "seed7", Path("k") / "seed7"
    command = seed_command(request, 7, out, ckpt)
    # The paths as given (./c.yaml, d/), not as Path would print them.
    assert command == (
        "adloco train --config ./c.yaml --run-name adloco --seed 7 --data d/ --calibration cal "
        "--base b --out o/seed7 --checkpoints k/seed7"
    )
    words = shlex.split(command)
    assert words[0] == "adloco"
    # Progress and live curves are no part of what the outputs are.
    assert requested(words[1:], monkeypatch) == TrainRequest(
        config="./c.yaml", run="adloco", seed=7, data="d/", calibration="cal",
        out=str(out), checkpoints=str(ckpt), base="b",
    )  # fmt: skip


@pytest.mark.parametrize("seed", [3, "all"])
def test_the_seeds_folders(seed):
    class Runs:
        experiment = "e"

        def run_seeds(self, run):
            assert run == "r"
            return [0, 5]

    given = {"config": "c", "run": "r", "seed": seed, "data": "d", "calibration": "cal"}
    request = TrainRequest(**given, out="o", checkpoints="k", live="l")
    todo = seeds_to_train(Runs(), request)
    if seed == "all":
        assert todo == [
            (0, Path("o/seed0"), Path("k/seed0")),
            (5, Path("o/seed5"), Path("k/seed5")),
        ]
        assert seed_live_dir(request, 5) == Path("l/seed5")
    else:
        assert todo == [(3, Path("o"), Path("k"))]
        assert seed_live_dir(request, 3) == Path("l")
    assert seed_live_dir(TrainRequest(**given, out="o", checkpoints="k"), 3) is None
