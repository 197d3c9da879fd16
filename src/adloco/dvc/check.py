"""``adloco dvc-check``: what DVC would delete, refused before DVC runs.

DVC deletes what it did not write from its stages' output folders, before any
``adloco`` command could refuse: ``dvc repro`` (``-f`` too) empties a folder
output that is not persistent before its stage runs, and ``dvc exp run`` (even
for stages it does not run), ``dvc exp apply`` and ``dvc checkout`` make every
folder output, persistent ones included, exactly the version DVC recorded. A
note left in a run's folder is gone without a word. No flag of dvc.yaml stops
the second kind (docs/workflow.md, DVC), so this command is the check to run
first: on every output folder of the stages of ``params.yaml`` (the corpus,
the tokenized data, the base model, each run's seed folders and checkpoints,
the variance and report folders) it runs the check the stage itself runs
before it replaces the folder (:func:`adloco.core.io.check_replaceable`: every file
listed in the manifest adloco wrote there; a checkpoint folder's own names),
and refuses naming the files. With ``--apply`` it also refuses an uncommitted
edit of a file git tracks that neither HEAD nor one of its experiments holds:
``dvc exp apply`` replaces every such file with the experiment's.
"""

from __future__ import annotations

import logging
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from adloco.config import Config, load_config
from adloco.core import paths
from adloco.core.io import EXAMPLES_SHOWN, ForeignFolderError, check_replaceable, is_own_temporary
from adloco.data.corpus import WHAT as CORPUS_WHAT
from adloco.engine import checkpoint

log = logging.getLogger(__name__)

# A run's folder (and its checkpoint folder) holds one folder per seed, and
# what a killed writer of one left beside it; a checkpoint set aside is `.stale`.
SEED_FOLDER = re.compile(r"seed\d+")
STALE_SEED_FOLDER = re.compile(r"seed\d+\.stale")
TEMPORARY = re.compile(r"\.(seed\d+)\.[a-z0-9]{8}\.tmp")
ADVICE = (
    "dvc repro, dvc exp run, dvc exp apply and dvc checkout delete what DVC did not write in "
    "these folders: move the files out of results/ and data/ (docs/workflow.md, DVC)"
)


@dataclass(frozen=True, kw_only=True)
class DvcCheckRequest:
    """What ``adloco dvc-check`` is asked: its command line, typed (:mod:`adloco.stages.dvc_check`).

    One field per argument of the stage, with its default
    (:func:`adloco.stages.declaration.request_problems` checks).
    """

    config: str | Path = "params.yaml"  # the file dvc.yaml reads
    # Also refuse uncommitted edits of files git tracks that no experiment holds
    # (before `dvc exp apply`, which replaces them).
    apply: bool = False


def check_before_dvc(request: DvcCheckRequest) -> int:
    """``adloco dvc-check``: the files DVC would delete, refused by name (ForeignFolderError)."""
    config_file = request.config
    problems = foreign_files(load_config(config_file))
    if request.apply:
        unsaved = unsaved_edits()
        if unsaved:
            problems.append(
                f"{len(unsaved)} file(s) git tracks hold uncommitted edits no experiment holds "
                f"({', '.join(unsaved)}), which dvc exp apply replaces with the experiment's: "
                "commit them first, or use dvc exp branch"
            )
    if problems:
        raise ForeignFolderError(
            f"{len(problems)} problem(s) before DVC runs: {'; '.join(problems)}; {ADVICE}"
        )
    log.info("no output folder of %s's stages holds files adloco did not write", config_file)
    return 0


@dataclass(frozen=True)
class Folder:
    """An output folder of a DVC stage and who writes it."""

    stage: str  # DVC's name of the stage (train@<run>)
    path: Path
    # "adloco <stage>", whose manifest lists the folder's files; None for a
    # checkpoint folder, written file by file and checked by its names.
    writer: str | None
    what: str  # the argument of the stage's command that names it
    in_git: tuple[str, ...] = ()  # its files git keeps (io.check_replaceable's in_git)


def output_folders(config: Config) -> list[Folder]:
    """Every folder dvc.yaml's stages write for ``config``, in the stages' order."""
    exp = config.experiment
    folders = [
        Folder("prepare-corpus", Path(config.data.raw_dir), "adloco prepare-corpus", CORPUS_WHAT),
        Folder("tokenize", paths.tokenized_dir(config.data.dataset), "adloco tokenize", "--out"),
        Folder("pretrain", paths.base_dir(exp), "adloco pretrain", "--out"),
        Folder("pretrain", paths.base_checkpoint_dir(exp), None, "--checkpoints"),
        Folder("variance", paths.variance_dir(exp), "adloco variance", "--out"),
    ]
    for run in config.runs:
        for seed in config.run_seeds(run):
            stage = f"train@{run}"
            folders.append(Folder(stage, paths.run_dir(exp, run, seed), "adloco train", "--out"))
            folders.append(
                Folder(stage, paths.checkpoint_dir(exp, run, seed), None, "--checkpoints")
            )
    report = paths.report_dir(exp)
    folders.append(Folder("report", report, "adloco report", "--out", paths.REPORT_FILES_IN_GIT))
    return folders


def _check(folder: Folder) -> None:
    if folder.writer is None:
        checkpoint.check_folder(folder.path, folder.what)
    else:
        check_replaceable(folder.path, folder.writer, folder.what, folder.in_git)


def _is_seed_folder(entry: Path) -> bool:
    names = (SEED_FOLDER, STALE_SEED_FOLDER)
    return entry.is_dir() and any(name.fullmatch(entry.name) for name in names)


def _strays(parent: Path) -> list[str]:
    """What ``parent`` (a run's folder of seed folders) holds beside them: no writer's."""
    if not parent.is_dir():
        return []
    strays = []
    for entry in sorted(parent.iterdir()):
        if _is_seed_folder(entry):
            continue
        temporary = TEMPORARY.fullmatch(entry.name)
        if temporary and is_own_temporary(temporary[1], entry.name):
            continue
        strays.append(entry.name + "/" * entry.is_dir())
    return strays


def foreign_files(config: Config) -> list[str]:
    """A line per output folder holding files adloco did not write (none: all is adloco's)."""
    folders = output_folders(config)
    problems = []
    for folder in folders:
        try:
            _check(folder)
        except ForeignFolderError as exc:
            problems.append(f"{folder.stage}: {exc}")
    # A run's seed folders lie in one folder per run, which DVC keeps as a whole
    # (so does a stale or a former seed's folder, checked as the seeds are).
    runs = {f.path.parent: f for f in folders if f.stage.startswith("train@")}
    for parent, folder in runs.items():
        for seed_folder in sorted(parent.iterdir()) if parent.is_dir() else []:
            if _is_seed_folder(seed_folder) and seed_folder not in {f.path for f in folders}:
                try:
                    _check(Folder(folder.stage, seed_folder, folder.writer, folder.what))
                except ForeignFolderError as exc:
                    problems.append(f"{folder.stage}: {exc}")
        strays = _strays(parent)
        if strays:
            shown = ", ".join(strays[:EXAMPLES_SHOWN]) + (", ..." if len(strays) > 3 else "")
            problems.append(
                f"{folder.stage}: {parent}: holds {len(strays)} file(s) or folder(s) beside its "
                f"seed folders that adloco did not write ({shown})"
            )
    return problems


def _git(root: Path, *args: str, stdin: str | None = None) -> str | None:
    """git's output in ``root``; None where it fails (no git, no repository, no HEAD)."""
    try:
        result = subprocess.run(
            ["git", *args], cwd=root, input=stdin, capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return result.stdout if result.returncode == 0 else None


def unsaved_edits(root: str | Path = ".") -> list[str]:
    """Files git tracks whose uncommitted content neither HEAD nor an experiment of HEAD holds.

    ``dvc exp apply`` replaces each with the experiment's version (keeping a
    copy only in ``refs/exps/apply/stash``, until the next apply); an edit an
    experiment already holds (``dvc exp run`` leaves its results in the
    workspace) is no loss.
    """
    root = Path(root)
    status = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=no")
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD")
    if status is None or head is None:
        return []
    entries, edited = status.split("\0"), []
    while entries:
        entry = entries.pop(0)
        if entry[:1] in ("R", "C"):
            entries.pop(0)  # the renamed file's former path
        if entry and (root / entry[3:]).is_file():  # a deleted file comes back whole
            edited.append(entry[3:])
    if not edited:
        return []
    head = head.strip()
    refs = _git(root, "for-each-ref", "--format=%(objectname)", f"refs/exps/{head[:2]}/{head[2:]}/")
    saved = (refs or "").split()
    now = (_git(root, "hash-object", "--", *edited) or "").split()
    wanted = "".join(f"{rev}:{path}\n" for path in edited for rev in saved)
    held = set((_git(root, "cat-file", "--batch-check=%(objectname)", stdin=wanted) or "").split())
    return [path for path, blob in zip(edited, now, strict=True) if blob not in held]
