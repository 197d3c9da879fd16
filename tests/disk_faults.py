"""A full disk for tests: files opened for writing whose writes fail with ENOSPC."""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
from pathlib import Path


class FullFile:
    """A file whose writes fail with ENOSPC, as on a full disk; the rest is the real file's."""

    def __init__(self, fh):
        self._fh = fh

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __iter__(self):
        return iter(self._fh)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


@contextlib.contextmanager
def full_disk(folder: Path, names: tuple[str, ...], monkeypatch):
    """Files opened for writing under ``folder`` whose name holds one of ``names``: ENOSPC."""
    real_open = builtins.open

    def fake_open(file, mode="r", *args, **kwargs):
        fh = real_open(file, mode, *args, **kwargs)
        path = os.fspath(file) if isinstance(file, (str, os.PathLike)) else ""
        writing = any(c in mode for c in "wax+")
        if writing and str(path).startswith(str(folder)) and any(n in path for n in names):
            return FullFile(fh)
        return fh

    with monkeypatch.context() as patch:
        patch.setattr(builtins, "open", fake_open)
        patch.setattr(io, "open", fake_open)
        yield
