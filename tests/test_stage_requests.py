"""One shape per stage: a stage's library takes one request whose fields are its arguments.

Each stage that declares a request (``Stage.request``) names a frozen,
keyword-only dataclass of its library with one field per argument, under
the argument's name and with its default; the stage's ``run`` builds it with
``STAGE.request_from(args)`` and reads no argument itself, so what a stage
takes is written once, as its arguments. A request that drifts from the
arguments (a field added, renamed or dropped, a default changed) fails here,
and in ``request_from`` when the stage runs.
"""

from __future__ import annotations

import argparse
import ast
import inspect
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path

import pytest

from adloco import cli
from adloco.stages import STAGES, stage
from adloco.stages.declaration import Stage, arg, request_problems

# Every stage that declares one: each of STAGES (the test below).
WITH_REQUESTS = [s.name for s in STAGES if s.request is not None]


def test_every_stage_declares_a_request():
    # A stage's library does its work: loads the configuration, finds what the
    # arguments name, logs what it wrote; its run only builds the request.
    assert WITH_REQUESTS == [s.name for s in STAGES]


@pytest.mark.parametrize("name", WITH_REQUESTS)
def test_a_stages_request_has_its_arguments_as_fields(name):
    declared = stage(name)
    request_type = declared.request_type()  # raises where the two differ
    assert request_problems(request_type, declared) == []
    # Every argument but the command's own (--threads) is a field.
    fields = set(request_type.__dataclass_fields__)
    assert fields == {a.name for a in declared.arguments} - {"threads"}


@pytest.mark.parametrize("name", WITH_REQUESTS)
def test_a_stages_run_reads_no_argument_itself(name):
    # The arguments reach the library through the request alone: a value read
    # from args in run would be a second list of what the stage takes.
    declared = stage(name)
    tree = ast.parse(inspect.getsource(declared.run))
    read = sorted(
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "args"
    )
    assert read == [], f"adloco {name}'s run reads args.{read}"
    assert "STAGE.request_from(args)" in inspect.getsource(declared.run)


def test_the_report_and_the_replay_share_their_fields():
    from adloco.report import ReportRequest
    from adloco.report.regime_report import ReplayRequest

    assert issubclass(ReportRequest, ReplayRequest)
    own = set(ReportRequest.__dataclass_fields__) - set(ReplayRequest.__dataclass_fields__)
    assert own == {"variance", "compare_scale"}


def test_each_flag_lands_in_its_field():
    from adloco.report import ReportRequest

    argv = ["report", "--config", "c.yaml", "--runs", "r", "--calibration", "cal"]
    argv += ["--variance", "v", "--out", "o", "--device", "a.json", "--device", "b.json"]
    argv += ["--network", "lan=1,0.001", "--compare-scale", "other/claims.json"]
    args = cli.build_parser().parse_args(argv)
    assert stage("report").request_from(args) == ReportRequest(
        config="c.yaml",
        runs="r",
        calibration="cal",
        variance="v",
        out="o",
        devices=["a.json", "b.json"],
        networks=["lan=1,0.001"],
        compare_scale="other/claims.json",
    )
    # --no-progress: the request's progress, off.
    argv = ["pretrain", "--config", "c", "--data", "d", "--out", "o", "--checkpoints", "k"]
    request = stage("pretrain").request_from(cli.build_parser().parse_args(argv))
    assert request.progress is True and request.live is None
    args = cli.build_parser().parse_args([*argv, "--no-progress", "--live", "l"])
    request = stage("pretrain").request_from(args)
    assert request.progress is False and request.live == "l"


def test_a_flag_left_out_is_its_fields_default():
    from adloco.data.tokenize import TokenizeRequest
    from adloco.dvc.check import DvcCheckRequest
    from adloco.dvc.params import DvcParamsRequest

    def request(*argv: str):
        return stage(argv[0]).request_from(cli.build_parser().parse_args(argv))

    assert request("dvc-params") == DvcParamsRequest()
    assert request("dvc-params").out == "params.yaml"
    assert request("dvc-check") == DvcCheckRequest(config="params.yaml", apply=False)
    assert request("dvc-check", "--apply").apply is True
    argv = ("tokenize", "--config", "c.yaml", "--out", "o")
    assert request(*argv) == TokenizeRequest(config="c.yaml", out="o", raw=None)


def toy_stage(request: str) -> Stage:
    return Stage(
        name="toy",
        help="a toy",
        description="A toy stage.",
        arguments=(
            arg("--config", required=True, help="configuration"),
            arg("--out", required=True, help="output folder"),
            arg("--repeat", type=int, default=2, help="how many times"),
            arg("--no-progress", action="store_false", dest="progress", help="no bar"),
            arg("--device", action="append", dest="devices", help="brought (repeatable)"),
            arg("--threads", type=int, help="threads", command_only=True),
        ),
        run=lambda args: 0,
        request=f"{__name__}.{request}",
    )


def toy_request(name: str, **options) -> type:
    """The toy stage's request as a dataclass made with ``options`` (frozen, kw_only)."""
    fields = [("config", str), ("out", str), ("repeat", int, field(default=2))]
    fields += [("progress", bool, field(default=True))]
    fields += [("devices", list[str] | None, field(default=None))]
    return make_dataclass(name, fields, **options)


ToyRequest = toy_request("ToyRequest", frozen=True, kw_only=True)
Unfrozen = toy_request("Unfrozen", kw_only=True)
Positional = toy_request("Positional", frozen=True)


@dataclass(frozen=True, kw_only=True)
class Drifted:
    config: str | Path
    output: str | Path  # renamed
    repeat: int = 3  # another default
    progress: bool = False  # the switch's meaning turned round
    devices: list[str] = field(default_factory=list)  # [] where the command gives None


def test_a_request_of_the_arguments_is_built_from_them():
    toy = toy_stage("ToyRequest")
    parser = argparse.ArgumentParser()
    toy.add_arguments(parser)
    args = parser.parse_args(["--config", "c", "--out", "o", "--threads", "2", "--device", "x"])
    assert toy.request_from(args) == ToyRequest(config="c", out="o", devices=["x"])


@pytest.mark.parametrize(
    ("request_type", "problems"),
    [
        (
            "Drifted",
            [
                "field output is no argument of the stage",
                "no field out for --out",
                "field repeat has default 3, --repeat is optional (default 2)",
                "field progress has default False, --no-progress is optional (default True)",
                "field devices has default [], --device is optional (default None)",
            ],
        ),
        ("Unfrozen", ["Unfrozen is not frozen"]),
        (
            "Positional",
            [f"field {n} is not keyword-only" for n in ToyRequest.__dataclass_fields__],
        ),
    ],
)
def test_a_request_that_drifted_from_the_arguments_is_refused(request_type, problems):
    toy = toy_stage(request_type)
    assert request_problems(globals()[request_type], toy) == problems
    with pytest.raises(TypeError, match=f"{request_type} and the arguments of adloco toy differ"):
        toy.request_from(argparse.Namespace())


def test_a_required_argument_has_a_field_without_a_default():
    @dataclass(frozen=True, kw_only=True)
    class Defaulted(ToyRequest):
        out: str | Path = "o"

    assert request_problems(Defaulted, toy_stage("ToyRequest")) == [
        "field out has default 'o', --out is required"
    ]
    assert request_problems(int, toy_stage("ToyRequest")) == ["int is not a dataclass"]
