"""``adloco dvc-params``: the parameters file DVC reads, made from one preset of ``config/``.

dvc.yaml takes its stages' values from ``params.yaml`` (its ``vars``, every
stage's ``params``), DVC reads that file at every git revision it compares
(``dvc exp show``, ``dvc params diff``), and ``dvc exp run -S key=value``
rewrites it. So the file is made for DVC, and tracked in git: a plain YAML
copy of one preset, every default of the schema filled in (so that every key
exists for DVC to track, show and set, and a change of a default in the code
is a changed parameter), the preset's comments left in the preset. Its first
line names the preset and this command. Choosing a preset is running the
command again; the stages then read ``--config params.yaml`` and write under
that preset's ``results/<experiment>/``. The preset is validated first, with
the messages every stage gives, a ``data.raw_dir`` DVC cannot keep as an
output (absolute, or outside the repository) is refused then, and a
``params.yaml`` this command did not write (a file of the user's) is
refused, never replaced.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from adloco.config import ConfigError, check_dvc_raw_dir, load_config, read_yaml, validate
from adloco.config.yaml_file import ConfigDumper, check_experiment_named
from adloco.core.io import write_text_atomic

log = logging.getLogger(__name__)

MARK = "# Made by `adloco dvc-params"  # the first line of every file this command writes


@dataclass(frozen=True, kw_only=True)
class DvcParamsRequest:
    """What ``adloco dvc-params`` is asked: its command line, typed
    (:mod:`adloco.stages.dvc_params`).

    One field per argument of the stage, with its default
    (:func:`adloco.stages.declaration.request_problems` checks).
    """

    preset: str = "config/config.yaml"  # the configuration DVC runs, as the header names it
    out: str | Path = "params.yaml"  # the file dvc.yaml reads (a link: the file it names)


def write_params(request: DvcParamsRequest) -> int:
    """``adloco dvc-params``: the request's preset as the parameters file at its ``out``."""
    preset = request.preset
    given = Path(request.out)
    text = params_text(preset)  # a bad preset fails before anything is written
    # A raw_dir DVC cannot keep fails here, not at dvc repro with DVC's reasonless error.
    check_dvc_raw_dir(load_config(preset), str(given.resolve().parent))
    # A link stays a link: the file it names is replaced, if this command wrote it.
    out = target(given)
    check_replaceable(out, given)
    write_text_atomic(out, text)
    log.info("wrote %s from %s: dvc.yaml's stages are now that preset's", given, preset)
    return 0


class _Dumper(ConfigDumper):
    """The configuration dumper (text the stages read back as text) writing null as nothing,
    as DVC does when ``-S`` rewrites the file: an experiment's ``git diff params.yaml`` is
    then the keys it set, and no more."""


_Dumper.add_representer(
    type(None), lambda dumper, _: dumper.represent_scalar("tag:yaml.org,2002:null", "")
)


def header(preset: str) -> str:
    return (
        f"{MARK} --preset {preset}`, for DVC: dvc.yaml reads this file\n"
        "# and `dvc exp run -S key=value` edits it. A plain copy of the preset with every\n"
        "# default written out: edit the preset, not this file, and run the command again\n"
        "# (docs/workflow.md, DVC).\n"
    )


def params_text(preset: str | Path, root: Path | None = None) -> str:
    """The file's text: the header, then the preset validated and default-filled.

    ``preset`` is relative to ``root`` (default: the working folder), as the
    header names it.
    """
    raw = read_yaml(root / preset if root else preset)
    check_experiment_named(raw, preset)
    try:
        filled = validate(copy.deepcopy(raw))
    except ConfigError as exc:
        raise ConfigError(f"{preset}: {exc}") from None
    body = yaml.dump(filled, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return header(Path(preset).as_posix()) + body


def target(out: Path) -> Path:
    """The file to write for ``--out``: ``out`` itself, or the file a link at ``out`` names.

    A link stays a link: the file it names is replaced (when this command wrote
    it, :func:`check_replaceable`), never the link. A link to a folder, or to
    nothing, is refused in one line.
    """
    if not out.is_symlink():
        if out.is_dir():
            raise ValueError(f"--out {out}: is a folder; give the path of params.yaml")
        return out
    named = Path(os.path.realpath(out))
    if named.is_dir():
        raise ValueError(
            f"--out {out}: a link to the folder {named}, not to a file; give the path of "
            "params.yaml (the link is kept)"
        )
    if not named.exists():
        raise ValueError(
            f"--out {out}: a link to {named}, which does not exist; give the file's own path "
            "as --out, or remove the link (it is kept)"
        )
    return named


def check_replaceable(out: Path, given: Path | None = None) -> None:
    """``out`` (the file written for ``--out`` ``given``) is absent or a file this command wrote."""
    if not out.exists():
        return
    with open(out, encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
    if not first.startswith(MARK):
        if given is not None and given != out:
            raise ValueError(
                f"{given}: a link to {out}, a file not written by adloco dvc-params (its first "
                f"line is not '{MARK} ...'), so neither is replaced; remove the link (the file "
                "it names is kept) or give another --out"
            )
        raise ValueError(
            f"{out}: not written by adloco dvc-params (its first line is not "
            f"'{MARK} ...'), so it is not replaced; move it away, or give another --out"
        )
