"""Two paths exchanged again and again (``renameat2``'s RENAME_EXCHANGE, as
an attacker with write access to a directory would), while a test races it."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


class Swapping:
    """A thread exchanging ``first`` and ``second`` until the block ends."""

    def __init__(self, first: Path, second: Path):
        self._paths = (os.fsencode(first), os.fsencode(second))
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Swapping:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        first, second = self._paths
        while not self._stop.is_set():
            if self._libc.renameat2(_AT_FDCWD, first, _AT_FDCWD, second, _RENAME_EXCHANGE):
                raise OSError(ctypes.get_errno(), "renameat2 failed")
