"""Local clips named by ``file://`` URIs or absolute paths, confined to the
directory the operator allowed."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from .errors import ApiError


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
        target = _allowed_file(_path_of(reference, param), root, param)
        with open(target, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except (ValueError, OSError):  # a NUL, a name too long, an unreadable file
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
    target = Path(path).resolve()
    if not target.is_relative_to(root.resolve()):
        raise ApiError(
            400, f"{param}: the file is outside the allowed media directory", param=param
        )
    if not target.is_file():
        raise ApiError(
            400, f"{param}: no such file under the allowed directory", param=param
        )
    return target
