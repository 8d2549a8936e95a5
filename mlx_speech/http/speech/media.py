"""Local clips named by ``file://`` URIs or absolute paths, confined to the
directory the operator allowed.

The path is resolved and checked, then opened from the allowed directory
one component at a time without following symbolic links, so what is read
is what was checked: a directory swapped for a link between the two is
refused, not followed. Only a regular file is read (a FIFO or a device
would block the reading thread or never end), and its open never waits.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse

from ...regular_files import open_regular
from ..errors import ApiError


def read_local_media(
    reference: str, root: Path | None, max_bytes: int, param: str
) -> bytes:
    """The clip a ``file://`` URI or an absolute path names."""
    if root is None:
        raise ApiError(
            400,
            f"{param}: local files (file:// URIs, paths) are refused; the server was "
            "started without --allowed-local-media-path (send the clip base64 instead)",
            param=param,
        )
    try:
        allowed = root.resolve()
        target = _allowed_file(_path_of(reference, param), allowed, param)
        data = _read_regular_file(allowed, target.relative_to(allowed), max_bytes)
    except (ValueError, OSError):  # a NUL, a name too long, a link, not a regular file
        raise ApiError(
            400,
            f"{param}: not a readable file under the allowed directory",
            param=param,
        ) from None
    if len(data) > max_bytes:
        raise ApiError(413, f"{param} is larger than {max_bytes} bytes", param=param)
    return data


def _path_of(reference: str, param: str) -> str:
    if not reference.lower().startswith("file:"):
        return reference  # an absolute path as it is
    parsed = urlparse(reference)  # ValueError on a malformed authority
    if parsed.netloc not in ("", "localhost"):
        raise ApiError(400, f"{param}: file:// URIs must name a local path", param=param)
    return unquote(parsed.path)


def _allowed_file(path: str, root: Path, param: str) -> Path:
    # resolve() follows symlinks and "..", so what is checked is what is read.
    try:
        target = Path(path).resolve()
    except (RuntimeError, OSError):  # a symlink loop (RuntimeError before 3.13)
        raise ApiError(
            400, f"{param}: the path cannot be resolved (a symlink loop?)", param=param
        ) from None
    if not target.is_relative_to(root.resolve()):
        raise ApiError(
            400, f"{param}: the file is outside the allowed media directory", param=param
        )
    if not target.is_file():
        raise ApiError(
            400, f"{param}: no such file under the allowed directory", param=param
        )
    return target


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _read_regular_file(root: Path, relative: Path, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``root / relative``, opened without
    following a link at any component; ``OSError`` if one is a link, or the
    file is not a regular file."""
    *folders, name = relative.parts
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for folder in folders:
            inner = os.open(folder, _DIRECTORY, dir_fd=directory)
            os.close(directory)
            directory = inner
        file = open_regular(name, dir_fd=directory, flags=os.O_NOFOLLOW)
    finally:
        os.close(directory)
    with file:
        return file.read(max_bytes + 1)
