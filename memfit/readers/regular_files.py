"""Opening files that may be anything: a FIFO, a device or a symlink must never block or mislead a reader.

Every file memfit reads from a model root or its state directory is opened here: without blocking (a FIFO
opens at once and is then refused, instead of waiting forever for a writer), checked with fstat on the same
descriptor to be a regular file, and optionally without following a final symlink.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO


class NotARegularFile(OSError):
    """The path names a FIFO, a device, a socket or a directory, not a file with bytes to read."""


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> BinaryIO:
    """The regular file at `path`, open for reading in binary; its descriptor's fstat is the file read."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(f"{os.fspath(path)!r} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_start(path: str | os.PathLike[str], limit: int) -> bytes:
    """At most `limit` bytes from the start of the regular file at `path`."""
    with open_regular(path) as f:
        return f.read(limit)
