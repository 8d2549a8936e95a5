"""Opening a file to read only if it is a regular file: a FIFO would block
its reader until a writer came (its very ``open`` waits), and a device may
never end. What is checked is the file opened, so it cannot be swapped
between the check and the read."""

from __future__ import annotations

import os
import stat
from typing import BinaryIO


class NotRegularFile(OSError):
    """The name is a FIFO, a device, a directory or a socket."""


def open_regular(
    name: str | os.PathLike, *, dir_fd: int | None = None, flags: int = 0
) -> BinaryIO:
    """``name`` opened for reading (``flags`` added, e.g. ``O_NOFOLLOW``);
    ``NotRegularFile`` unless it is a regular file, ``OSError`` if it
    cannot be opened."""
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | flags, dir_fd=dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegularFile(f"{os.fspath(name)} is not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")
