"""One line for every fault a user meets: what happened, which file or key, what to do.

``adloco <stage>`` (:func:`adloco.cli.main`) prints ``adloco <stage>: error:
<message>`` for the exceptions :func:`describe` knows, instead of a traceback
(``adloco -v`` shows the traceback). The stages raise ``ValueError`` (with
:class:`adloco.config.ConfigError` for a setting, naming the key) and
``FileNotFoundError`` with messages of that shape; an ``OSError`` that the
operating system raised (a full disk, a read-only folder) is described here
from its error number and the file it names, which :mod:`adloco.core.io` sets to
the output rather than its temporary.
"""

from __future__ import annotations

import errno
import os

# A write that failed for lack of room: the disk, the user's quota, a file size limit.
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
NOT_ALLOWED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def describe(exc: BaseException) -> str | None:
    """The one-line message for ``exc``, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return _os_error(exc)
    if isinstance(exc, (ValueError, OSError)):
        return str(exc)
    return None


def _os_error(exc: OSError) -> str:
    name = exc.filename if exc.filename is not None else "an output file"
    reason = exc.strerror or os.strerror(exc.errno)
    if exc.errno in NO_SPACE:
        return (
            f"no space left to write {name} ({reason}); free space on its file system, or "
            "write the outputs elsewhere, and run the same command again (nothing partial "
            "was kept)"
        )
    if exc.errno in NOT_ALLOWED:
        return f"{name}: {reason}; make it writable, or choose another folder"
    if exc.filename is None:
        return str(exc)
    if exc.errno == errno.ENOENT:
        return f"{name}: not found"
    return f"{name}: {reason}"
