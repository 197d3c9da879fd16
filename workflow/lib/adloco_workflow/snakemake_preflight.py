"""What the Snakemake profiles check before Snakemake reads the configuration file.

Snakemake loads a ``--configfile`` (and the workflow's ``configfile:``,
``config/config.yaml``) itself, before any code of the workflow runs; a YAML
syntax error then ends in "Config file is not valid JSON or YAML", naming
neither the file nor the line, and an error the workflow raises later comes
with Snakemake's own traceback lines. The profiles (``profiles/default``,
``profiles/slurm``) are YTE templates that Snakemake evaluates while
it parses its own command line, earlier still: their ``__definitions__`` call
:func:`check_configfiles`, which stops Snakemake with one line,
``snakemake: error: ...``, when the command line sets ``--config key=value``
(the file is the single source of the settings), or when a configuration file
is not one every ``adloco`` command would accept (:func:`adloco.config.load_config`:
syntax, duplicate keys, a missing ``experiment``, any invalid value, naming the
file and the key), or when its ``data.raw_dir`` holds files adloco did not
write, or when a ``--configfile`` is no file at all (Snakemake's own message
would be a traceback; often a target written after ``--configfile``, which
takes it for a second file). ``workflow/rules/common.smk`` checks the same again for a run without
the profiles (``--workflow-profile none``), and puts the ``adloco`` beside
Snakemake's Python on the jobs' PATH (:func:`put_adloco_on_path`).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import MutableMapping
from pathlib import Path

from adloco.config import Config, ConfigError, load_config
from adloco.core import paths
from adloco.core.io import ForeignFolderError, check_replaceable
from adloco.data import corpus

DEFAULT = Path("config/config.yaml")
OPTIONS = ("--configfile", "--configfiles")
CONFIG_OPTIONS = ("--config", "-C")


def _groups(argv: list[str], options: tuple[str, ...]) -> list[list[str]]:
    """The values of each use of any of ``options`` (one or more words, or ``--opt=value``)."""
    groups: list[list[str]] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg in options:
            groups.append([])
            while index < len(argv) and not argv[index].startswith("-"):
                groups[-1].append(argv[index])
                index += 1
        elif arg.startswith(tuple(f"{option}=" for option in options if option.startswith("--"))):
            groups.append([arg.split("=", 1)[1]])
    return groups


def _values(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """The values given with any of ``options``, in order."""
    return [value for group in _groups(argv, options) for value in group]


def configfile_args(argv: list[str]) -> list[str]:
    """The files given with ``--configfile``/``--configfiles``."""
    return _values(argv, OPTIONS)


def config_args(argv: list[str]) -> list[str]:
    """The ``key=value`` settings given with ``--config``/``-C``."""
    return _values(argv, CONFIG_OPTIONS)


def directory_outputs(config: Config) -> list[tuple[Path, str, str, tuple[str, ...]]]:
    """Every folder the workflow declares as a ``directory()`` output, with the stage
    that writes it, what names it and the files of it git keeps: (folder, writer, name,
    in git) (:func:`adloco.core.io.check_replaceable`).

    The report's ``figures/`` is listed in the manifest of the report's folder,
    which the report replaces as a whole: that folder is the one checked.
    """
    out = []
    if config.data.source == "offline-wiki":
        out.append((Path(config.data.raw_dir), corpus.WRITER, "data.raw_dir", ()))
    for run in config.runs:
        for seed in config.run_seeds(run):
            folder = paths.final_model_dir(paths.run_dir(config.experiment, run, seed))
            out.append((folder, "adloco train", f"run {run} seed {seed}'s final model", ()))
    report = paths.report_dir(config.experiment)
    what = "the report's folder (with its figures/)"
    out.append((report, "adloco report", what, paths.REPORT_FILES_IN_GIT))
    return out


def check_directory_outputs(config: Config) -> None:
    """Snakemake empties a ``directory()`` output before its job runs (``--forcerun``, a
    changed setting): refuse, before any job, one that holds a file adloco did not write."""
    for folder, writer, what, in_git in directory_outputs(config):
        check_replaceable(folder, writer, what, in_git)


def _problem(name: str) -> str | None:
    """Why the configuration file ``name`` would be refused, in one line, or None."""
    try:
        check_directory_outputs(load_config(name))
    except (ConfigError, ForeignFolderError) as exc:
        message = " ".join(str(exc).split())
        return message if message.startswith(name) else f"{name}: {message}"
    return None


def missing_configfile(name: str, before: list[str]) -> str:
    """The one line for a ``--configfile`` value ``name`` that is no file, after ``before``.

    Snakemake's ``--configfile`` takes every word up to the next option, so a
    target written after it (``--configfile config/test.yaml all``) is read as
    a second configuration file.
    """
    if before:
        given = shlex.join([*before, name])
        return (
            f"snakemake: error: --configfile {given}: {name} is no file; Snakemake reads every "
            "word after --configfile as a configuration file, so a target written after it "
            "is taken for one: write the targets before --configfile (snakemake "
            f"{shlex.quote(name)} --configfile {shlex.quote(before[0])})"
        )
    return (
        f"snakemake: error: --configfile {shlex.quote(name)}: no such file; pass the path of a "
        "configuration file (config/config.yaml, config/test.yaml, or a copy of one), "
        "relative to the folder Snakemake runs in"
    )


def put_adloco_on_path(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Put the folder of the Python running Snakemake first on the jobs' PATH, when it
    holds ``adloco`` and PATH lacks it; returns that folder, or None when nothing changed.

    ``.venv/bin/snakemake`` run without the virtual environment on PATH would
    otherwise start jobs that find no ``adloco`` (or another install's). With
    ``--use-conda`` each job's shell activates the rule's environment after
    this, which puts that environment's ``adloco`` before this one.
    """
    environ = os.environ if environ is None else environ
    folder = os.path.dirname(sys.executable)
    if not os.access(os.path.join(folder, "adloco"), os.X_OK):
        return None
    entries = [e for e in environ.get("PATH", "").split(os.pathsep) if e]
    if folder in entries:
        return None
    environ["PATH"] = os.pathsep.join([folder, *entries])
    return folder


def check_configfiles(argv: list[str] | None = None) -> None:
    """Stop with ``snakemake: error: <file>: <what>`` on a configuration adloco refuses.

    Checks the ``--configfile`` files of ``argv`` (default: this process's
    arguments), else the workflow's default file, and refuses ``--config``. A
    ``--configfile`` that is no file is refused too (:func:`missing_configfile`),
    where Snakemake would end in a traceback.
    """
    argv = sys.argv[1:] if argv is None else argv
    overrides = config_args(argv)
    if overrides:
        raise SystemExit(
            f"snakemake: error: --config {' '.join(overrides)}: the configuration file is the "
            "single source of every setting (the adloco commands read the file, not "
            "Snakemake's config); copy config/config.yaml, edit the copy and pass it with "
            "--configfile"
        )
    for group in _groups(argv, OPTIONS):
        for position, name in enumerate(group):
            if not Path(name).is_file():
                raise SystemExit(missing_configfile(name, group[:position]))
    files = configfile_args(argv) or ([str(DEFAULT)] if DEFAULT.is_file() else [])
    for name in files:
        if not Path(name).is_file():
            continue
        problem = _problem(name)
        if problem is not None:
            raise SystemExit(f"snakemake: error: {problem}")
