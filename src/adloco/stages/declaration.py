"""The types a stage is declared with: its command's arguments, its DVC files and keys.

A :class:`Stage` says once what ``adloco <stage>`` takes (``Argument``), which of
those arguments name what it writes, whether it trains, the configuration
keys it depends on (``Key``: the Snakemake rule's ``settings`` param, DVC's
``params``), the request its library takes and, for a stage DVC runs, its
command as dvc.yaml spells it and its inputs and outputs (``Dvc``, ``Path_``).
The CLI (:mod:`adloco.cli`) builds its parser from these, the Snakemake rules
read the keys, and dvc.yaml is written from them
(workflow/lib/adloco_workflow/dvc_yaml.py). Standard library only: Snakemake
imports the declarations while it parses the workflow, and ``adloco --help``
must not import torch.

A stage's library takes the command's values as one request: a frozen,
keyword-only dataclass of the library's own (``Stage.request`` names it),
with one field per argument of the stage, under the argument's name and with
its default (none for a required one); the library, not the stage, loads the
configuration and reads what the values name. :meth:`Stage.request_from`
builds it from the parsed arguments and refuses a request type whose fields
and the arguments differ (:func:`request_problems`), so the list of what a
stage takes is written once, as its arguments, and checked against the one
type its library declares.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Argument:
    """One argument of a stage's command, as ``argparse.add_argument`` takes it.

    Only the fields given are passed on (``action="store_true"`` has its own
    default of False, which a passed ``default=None`` would replace).
    """

    flags: tuple[str, ...]
    help: str
    required: bool = False
    default: Any = None
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    # "store_true" or "store_false" (a switch), "append" (repeatable); None stores one value.
    action: str | None = None
    # The attribute of the parsed arguments, when not the first flag's.
    dest: str | None = None
    # Read by the command itself (adloco.cli: --threads), not by the stage's library,
    # so no field of its request.
    command_only: bool = False

    @property
    def name(self) -> str:
        """The attribute the parsed arguments hold it under."""
        return self.dest or self.flags[0].lstrip("-").replace("-", "_")

    @property
    def default_value(self) -> Any:
        """What the parsed arguments hold when the flag is not given."""
        switches = {"store_true": False, "store_false": True}
        return switches.get(self.action or "", self.default)

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        given = {
            "action": self.action,
            "dest": self.dest,
            "type": self.type,
            "default": self.default,
            "metavar": self.metavar,
        }
        options = {key: value for key, value in given.items() if value is not None}
        if self.required:
            options["required"] = True
        parser.add_argument(*self.flags, **options, help=self.help)


def arg(*flags: str, help: str, **options: Any) -> Argument:  # noqa: A002 (argparse's word)
    """An :class:`Argument` written as ``add_argument`` is called."""
    return Argument(tuple(flags), help, **options)


@dataclass(frozen=True)
class Path_:
    """A stage's input or output in dvc.yaml: its path and DVC's flags for it."""

    path: str
    # Comment lines written above it in dvc.yaml.
    note: tuple[str, ...] = ()
    # DVC keeps it when the stage re-runs (a resumable checkpoint folder).
    persist: bool = False
    # False: git keeps it, not DVC's cache.
    cache: bool = True


@dataclass(frozen=True)
class Key:
    """A configuration key a stage depends on: its dotted name (``{run}`` a wildcard)."""

    name: str
    note: tuple[str, ...] = ()
    # Read only by DVC's stage (one per run, every seed), not by a Snakemake job (one seed).
    dvc_only: bool = False


def keys(*names: str) -> tuple[Key, ...]:
    """A :class:`Key` of each name, without notes."""
    return tuple(Key(name) for name in names)


@dataclass(frozen=True)
class Dvc:
    """A stage as dvc.yaml runs it: ``adloco <stage>`` with ``args`` (flag, value)."""

    args: tuple[tuple[str, str], ...]
    deps: tuple[Path_, ...] = ()
    outs: tuple[Path_, ...] = ()
    metrics: tuple[Path_, ...] = ()
    plots: tuple[Path_, ...] = ()
    # DVC's `foreach` and the DVC value of each wildcard.
    foreach: str | None = None
    wildcards: dict[str, str] = field(default_factory=dict)
    # Comment lines written above the stage.
    note: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stage:
    """One stage of the pipeline: the ``adloco <name>`` command and where it sits."""

    name: str
    help: str  # one line in `adloco --help`
    description: str  # `adloco <stage> --help`
    arguments: tuple[Argument, ...]
    # The stage's entry: the parsed arguments in, an exit status out. It imports
    # its library (torch, numpy) when called, never at import.
    run: Callable[[argparse.Namespace], int]
    # Arguments naming what the stage writes, proved writable before it starts
    # (not after hours of work): folders it writes into, and files or folders
    # it replaces atomically (their parent folder).
    out_dirs: tuple[str, ...] = ()
    out_files: tuple[str, ...] = ()
    # A stage that runs training passes: started by adloco.engine.process
    # (freed memory kept, torch's threads), the same for calibration as for training.
    trains: bool = False
    # The configuration keys it depends on (a Snakemake rule's `settings` param).
    keys: tuple[Key, ...] = ()
    # The stage as dvc.yaml runs it; None: not a stage of dvc.yaml.
    dvc: Dvc | None = None
    # The request its library takes, as "package.module.Type" (imported when the
    # stage runs): one field per argument (command_only ones aside). Every stage
    # of STAGES declares one (tests/test_stage_requests.py); None: a stage
    # without a library, whose run reads its arguments itself.
    request: str | None = None

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        for argument in self.arguments:
            argument.add_to(parser)

    def request_arguments(self) -> dict[str, Argument]:
        """The arguments its request holds, by field name: all but the command's own."""
        return {a.name: a for a in self.arguments if not a.command_only}

    def request_type(self) -> type:
        """The type ``request`` names, imported; TypeError where its fields and the
        arguments differ (:func:`request_problems`)."""
        if self.request is None:
            raise TypeError(f"adloco {self.name} declares no request")
        module, _, name = self.request.rpartition(".")
        found = getattr(importlib.import_module(module), name)
        problems = request_problems(found, self)
        if problems:
            raise TypeError(
                f"{self.request} and the arguments of adloco {self.name} differ: "
                + "; ".join(problems)
            )
        return found

    def request_from(self, args: argparse.Namespace) -> Any:
        """The request of the parsed ``args``: each field its argument's value."""
        fields = self.request_arguments()
        return self.request_type()(**{name: getattr(args, name) for name in fields})

    def snakemake_keys(self) -> list[str]:
        """The keys a Snakemake job of the stage reads (one seed: no DVC-only key)."""
        return [key.name for key in self.keys if not key.dvc_only]


def _default(found: dataclasses.Field) -> Any:
    """A dataclass field's default (its factory's value), or ``dataclasses.MISSING``."""
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    return found.default


def request_problems(request_type: type, stage: Stage) -> list[str]:
    """How ``request_type`` falls short of being ``stage``'s request (none: it is one).

    A frozen dataclass whose fields are keyword-only, one per argument of the
    stage (:meth:`Stage.request_arguments`), under the argument's name; a
    required argument's field has no default, any other's is the argument's.
    """
    if not dataclasses.is_dataclass(request_type):
        return [f"{request_type.__name__} is not a dataclass"]
    problems = []
    if not request_type.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        problems.append(f"{request_type.__name__} is not frozen")
    fields = {f.name: f for f in dataclasses.fields(request_type)}
    arguments = stage.request_arguments()
    extra = sorted(set(fields) - set(arguments))
    problems += [f"field {name} is no argument of the stage" for name in extra]
    for name, argument in arguments.items():
        flag = argument.flags[0]
        if name not in fields:
            problems.append(f"no field {name} for {flag}")
            continue
        if not fields[name].kw_only:
            problems.append(f"field {name} is not keyword-only")
        default = _default(fields[name])
        wanted = dataclasses.MISSING if argument.required else argument.default_value
        if default != wanted:
            has = "no default" if default is dataclasses.MISSING else f"default {default!r}"
            wants = "required" if argument.required else f"optional (default {wanted!r})"
            problems.append(f"field {name} has {has}, {flag} is {wants}")
    return problems
