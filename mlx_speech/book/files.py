"""The files a book becomes, for the command and the server's jobs alike:
each written whole or not at all (under a temporary name beside its place,
then renamed into it), and named from a title on any system."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path

_NOT_IN_NAMES = re.compile(r'[\\/:*?"<>|\x00-\x1f\x7f]+')


def write_whole(path: Path, write: Callable[[Path], object]) -> None:
    """``write`` into a temporary name beside ``path``, renamed into place;
    whatever ``write`` raises, no part of the file is left."""
    partial = path.with_name(f".{path.name}.partial{path.suffix}")
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()


def file_name(title: str, fallback: str) -> str:
    """``title`` as a file name on any system (no separators, no characters
    Windows refuses, at most 80 characters), or ``fallback`` if nothing is left."""
    name = _NOT_IN_NAMES.sub(" ", title)
    return " ".join(name.split())[:80].strip(" .") or fallback
