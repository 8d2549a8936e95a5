"""Every place a command will write, checked before the model loads: for
``book``, the audiobook, its captions, its chapter files and the folder of
kept sentences. None may be the book being read, or another of them; none may
be a device or anything else that is not a regular file; each folder must
be there (or be made) and writable; each name, with the temporary name it
is written under first, must fit the file system."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from ..book.files import partial_path

_DEFAULT_NAME_MAX = 255


class PlaceError(ValueError):
    """A place the command cannot write, in one line that says what to do."""


def check_places(
    book: Path,
    files: Sequence[Path],
    folders: Sequence[Path],
) -> None:
    """``files`` are written whole (``files.write_whole``); ``folders`` are
    made where missing and written into."""
    for folder in folders:
        _check_folder(folder)
    seen: dict[str, Path] = {}
    made = {folder.absolute() for folder in folders}
    for path in files:
        _check_file(path, book)
        if path.absolute().parent not in made:
            _check_folder(path.absolute().parent, made=False)
        real = os.path.realpath(path)
        if real in seen:
            raise PlaceError(
                f"cannot write {path}: {seen[real]} is written there too; name another"
            )
        seen[real] = path


def _check_file(path: Path, book: Path) -> None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        found = None
    except OSError as error:
        raise PlaceError(f"cannot write {path}: {error.strerror}") from None
    if found is not None:
        if stat.S_ISDIR(found.st_mode):
            raise PlaceError(f"cannot write {path}: it is a directory; name a file in it")
        if not stat.S_ISREG(found.st_mode):
            raise PlaceError(
                f"cannot write {path}: it is a device or other special file, not a "
                "regular file; name a file"
            )
        if os.path.samefile(path, book):
            raise PlaceError(
                f"cannot write {path}: it is the book being read; name another file"
            )
    _check_name(partial_path(path))


def check_writable(folder: Path) -> None:
    """``folder`` exists and this user can write in it (``PlaceError``)."""
    _check_folder(folder, made=False)


def _check_folder(folder: Path, made: bool = True) -> None:
    """``folder`` is a writable directory, or (``made``) the nearest folder
    above it that exists is, so that it can be made."""
    folder = folder.absolute()
    existing = folder
    while made:
        _check_name(existing)  # before it is looked up: a name too long fails that
        if existing.exists() or existing == existing.parent:
            break
        existing = existing.parent
    if not existing.exists():
        raise PlaceError(f"cannot write in {folder}: it does not exist")
    if not existing.is_dir():
        raise PlaceError(f"cannot write in {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PlaceError(
            f"cannot write in {folder}: {existing} cannot be written by this user"
            " (or is on a read-only disk); choose a folder you can write in"
        )


def _check_name(path: Path) -> None:
    parent = path.absolute().parent
    try:
        name_max = os.pathconf(parent, "PC_NAME_MAX") if parent.is_dir() else None
    except OSError:
        name_max = None
    name_max = name_max or _DEFAULT_NAME_MAX
    length = len(os.fsencode(path.name))
    if length > name_max:
        raise PlaceError(
            f"cannot write {path.name[:40]}…: with what is added to it while it is "
            f"written, the name is {length} bytes, and the file system allows "
            f"{name_max}; choose a shorter name"
        )
