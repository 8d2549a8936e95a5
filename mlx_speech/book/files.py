"""The files a book becomes, for the command and the server's jobs alike:
each written whole or not at all (under a temporary name beside its place,
then renamed into it), and named from a title on any system."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

_NOT_IN_NAMES = re.compile(r'[\\/:*?"<>|\x00-\x1f\x7f]+')
# Bidirectional controls reorder what is shown ("x\u202eexe.m4b" reads as
# "xb4m.exe"): a name never keeps them.
_BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]+")
TITLE_NAME_CHARACTERS = 80
# With a chapter's number, its suffix and the temporary name's additions, a
# title's part stays under the 255 bytes file systems allow a name.
TITLE_NAME_BYTES = 200


def write_whole(path: Path, write: Callable[[Path], object]) -> None:
    """``write`` into a temporary name beside ``path``, renamed into place;
    whatever ``write`` raises, no part of the file is left."""
    partial = partial_path(path)
    try:
        write(partial)
        os.replace(partial, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()


def partial_path(path: Path) -> Path:
    """Where ``write_whole`` writes ``path`` before renaming it."""
    return path.with_name(f".{path.name}.partial{path.suffix}")


def file_name(title: str, fallback: str) -> str:
    """``title`` as a file name on any system (no separators, no characters
    Windows refuses, no bidirectional controls; at most 80 characters and
    ``TITLE_NAME_BYTES`` of UTF-8, never cut inside a character), or
    ``fallback`` if nothing is left."""
    name = _BIDI_CONTROLS.sub("", _NOT_IN_NAMES.sub(" ", title))
    name = " ".join(name.split())[:TITLE_NAME_CHARACTERS]
    name = name.encode()[:TITLE_NAME_BYTES].decode(errors="ignore")
    return name.strip(" .") or fallback


def chapter_paths(titles: Sequence[str], folder: Path, suffix: str) -> list[Path]:
    """Where each chapter of a book is written as a file of its own: its
    number, padded to sort, then its title."""
    width = len(str(len(titles)))
    return [
        folder / f"{number:0{width}d} {file_name(title, 'chapter')}{suffix}"
        for number, title in enumerate(titles, start=1)
    ]
