"""What the Snakemake profiles check before Snakemake reads the configuration file.

Snakemake loads a ``--configfile`` (and the workflow's ``configfile:``,
``config/config.yaml``) itself, before any code of the workflow runs; a YAML
syntax error then ends in "Config file is not valid JSON or YAML", naming
neither the file nor the line. The profiles (``profiles/default``,
``workflow/profiles/slurm``) are YTE templates that Snakemake evaluates while
it parses its own command line, earlier still: their ``__definitions__`` call
:func:`check_configfiles`, which reads the same files the way every ``adloco``
command does (:func:`adloco.config.read_yaml`) and stops Snakemake with the
file, line and column of a syntax error. Everything else in the file is
checked once Snakemake has read it, by ``workflow/rules/common.smk``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from adloco.config import ConfigError, read_yaml

DEFAULT = Path("config/config.yaml")
OPTIONS = ("--configfile", "--configfiles")


def configfile_args(argv: list[str]) -> list[str]:
    """The files given with ``--configfile``/``--configfiles`` (each takes one or more)."""
    files: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg in OPTIONS:
            while index < len(argv) and not argv[index].startswith("-"):
                files.append(argv[index])
                index += 1
        elif arg.startswith(tuple(f"{option}=" for option in OPTIONS)):
            files.append(arg.split("=", 1)[1])
    return files


def check_configfiles(argv: list[str] | None = None) -> None:
    """Stop with ``snakemake: <file>: not valid YAML: line L, column C: ...`` on a syntax error.

    Checks the ``--configfile`` files of ``argv`` (default: this process's
    arguments), else the workflow's default file. A missing file is left to
    Snakemake's own message.
    """
    argv = sys.argv[1:] if argv is None else argv
    files = configfile_args(argv) or ([str(DEFAULT)] if DEFAULT.is_file() else [])
    for name in files:
        if not Path(name).is_file():
            continue
        try:
            read_yaml(name)
        except ConfigError as exc:
            raise SystemExit(f"snakemake: {exc}") from None
