"""Saved voices: a directory of clips that survive restarts and crashes.

Each voice is a folder ``<dir>/<name>/`` holding the clip as uploaded
(``clip.<ext>``), ``voice.json`` (name, ref_text, created, duration, version)
and, once a model has encoded it, ``codes-<codec id>-<version>.npy``. A voice
appears by renaming a fully written, fsynced temporary folder into place, is
replaced by swapping the new folder with the old one in one step, and
disappears by renaming it away before deletion, so a crash at any point
leaves every saved voice whole and no half voice visible.
"""

from __future__ import annotations

import ctypes
import errno
import io
import json
import logging
import os
import re
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

from ..errors import InvalidRequest, shown
from .clip_rules import check_clip_header, check_ref_text, decoding_failure

log = logging.getLogger("mlx_speech.voices")

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
RESERVED_NAMES = {"default"}
_PENDING_PREFIX = ".pending-"
_DELETED_PREFIX = ".deleted-"


class UnknownVoice(KeyError):
    pass


def default_voices_dir() -> Path:
    """Per-user data directory: ~/Library/Application Support on macOS, XDG elsewhere."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "mlx-speech" / "voices"


@dataclass(frozen=True)
class SavedVoice:
    name: str
    folder: Path
    clip_name: str
    ref_text: str | None
    created: float
    duration_s: float
    # Names this upload: codes computed from a replaced clip never pass for
    # the new one's. None for voices saved before versions existed.
    version: str | None = None

    @property
    def clip(self) -> Path:
        return self.folder / self.clip_name

    def codes_path(self, codec_id: str) -> Path:
        suffix = f"-{self.version}" if self.version else ""
        return self.folder / f"codes-{codec_id}{suffix}.npy"

    def load_codes(self, codec_id: str) -> np.ndarray | None:
        try:
            return np.load(self.codes_path(codec_id), allow_pickle=False)
        except (OSError, ValueError):
            return None

    def save_codes(self, codec_id: str, codes: np.ndarray) -> None:
        """Best effort: stored codes only save encoder time later, so a voice
        deleted meanwhile or a full disk costs nothing but a log line."""
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(codes, dtype=np.int32), allow_pickle=False)
        try:
            _write_atomically(self.codes_path(codec_id), buffer.getvalue())
        except OSError as error:
            log.warning("could not store codes for voice %s: %s", self.name, error)


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f"{_PENDING_PREFIX}{secrets.token_hex(6)}-{path.name}")
    _write_file(temporary, data)
    os.replace(temporary, path)
    _fsync_dir(path.parent)


_RENAME_EXCHANGE = 2  # Linux renameat2
_RENAME_SWAP = 2  # macOS renamex_np
_AT_FDCWD = -100
_NO_SWAP = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


def _swap(first: Path, second: Path) -> bool:
    """Exchange two folders in one step (renameat2 on Linux, renamex_np on
    macOS); False where the system or filesystem cannot."""
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = os.fsencode(first), os.fsencode(second)
    try:
        if sys.platform == "darwin":
            failed = libc.renamex_np(a, b, _RENAME_SWAP)
        else:
            failed = libc.renameat2(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE)
    except AttributeError:  # a libc without the call
        return False
    if not failed:
        return True
    code = ctypes.get_errno()
    if code in _NO_SWAP:
        return False
    raise OSError(code, os.strerror(code), str(second))


def validate_name(name: object) -> str:
    if (
        not isinstance(name, str)
        or not NAME_PATTERN.fullmatch(name)
        or name.startswith(".")
    ):
        raise InvalidRequest(
            "name", "voice names are 1-64 of A-Z a-z 0-9 _ . - and do not start with '.'"
        )
    if name.lower() in RESERVED_NAMES:
        raise InvalidRequest("name", f"{shown(name)} is reserved")
    return name


def clip_duration(clip: bytes) -> tuple[float, str]:
    """Seconds of audio and the container's file suffix; InvalidRequest if unusable."""
    try:
        info = soundfile.info(io.BytesIO(clip))
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as error:
        raise InvalidRequest(
            "audio_sample", f"the clip could not be decoded: {decoding_failure(error)}"
        ) from None
    seconds = info.frames / info.samplerate if info.samplerate else 0.0
    check_clip_header(seconds, info.channels, info.samplerate, "audio_sample")
    return seconds, info.format.lower()


class VoiceStore:
    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory).expanduser() if directory else default_voices_dir()

    def _ready(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        return self.directory

    def list(self) -> list[SavedVoice]:
        if not self.directory.is_dir():
            return []
        voices = []
        for folder in sorted(self.directory.iterdir()):
            if folder.name.startswith("."):
                continue
            voice = self._read(folder)
            if voice is not None:
                voices.append(voice)
        return voices

    def get(self, name: str) -> SavedVoice:
        voice = self.find(name)
        if voice is None:
            raise UnknownVoice(name)
        return voice

    def find(self, name: str) -> SavedVoice | None:
        """The voice saved under exactly ``name``. The folder must be listed
        under that name: on a case-insensitive volume (macOS's default)
        ``DIR/GRANDMA`` would open ``grandma``'s."""
        if not NAME_PATTERN.fullmatch(name) or name.startswith("."):
            return None
        if name not in self._names():
            return None
        folder = self.directory / name
        voice = self._read(folder)
        if voice is None and folder.is_dir():
            voice = self._read(folder)  # read across a replacement: once more
        return voice

    def _names(self) -> set[str]:
        try:
            return set(os.listdir(self.directory))
        except OSError:  # no directory yet, or not one
            return set()

    def _read(self, folder: Path) -> SavedVoice | None:
        try:
            meta = json.loads((folder / "voice.json").read_text())
            voice = SavedVoice(
                name=folder.name,
                folder=folder,
                clip_name=meta["clip"],
                ref_text=meta.get("ref_text"),
                created=float(meta["created"]),
                duration_s=float(meta["duration_s"]),
                version=meta.get("version"),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return voice if voice.clip.is_file() else None

    def add(self, name: str, clip: bytes, ref_text: str | None = None) -> SavedVoice:
        """Save the clip as ``name``; a voice of that name is replaced (as
        vLLM-Omni does) in one step: readers see the old voice or the new."""
        name = validate_name(name)
        check_ref_text(ref_text)
        seconds, suffix = clip_duration(clip)
        root = self._ready()
        pending = root / f"{_PENDING_PREFIX}{secrets.token_hex(8)}"
        pending.mkdir()
        voice = SavedVoice(
            name,
            root / name,
            f"clip.{suffix}",
            ref_text,
            time.time(),
            seconds,
            secrets.token_hex(6),
        )
        try:
            _write_file(pending / voice.clip_name, clip)
            meta = {
                "clip": voice.clip_name,
                "ref_text": ref_text,
                "created": voice.created,
                "duration_s": seconds,
                "version": voice.version,
            }
            _write_file(pending / "voice.json", json.dumps(meta).encode())
            _fsync_dir(pending)
            self._put_in_place(pending, root / name)
            _fsync_dir(root)
        finally:
            if pending.exists():  # unwritten, or the voice it replaced
                shutil.rmtree(pending, ignore_errors=True)
        return voice  # what was written: another request may delete it meanwhile

    def _put_in_place(self, pending: Path, target: Path) -> None:
        """Rename ``pending`` to ``target``; a voice already there ends up at
        ``pending``. Where folders cannot be swapped, the old one is renamed
        away first, so the name is briefly absent (never half written)."""
        displaced: list[Path] = []
        while True:
            try:
                os.rename(pending, target)  # atomic; fails if a voice is there
                break
            except OSError as error:
                if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
            try:
                if _swap(pending, target):
                    return
                doomed = self.directory / f"{_DELETED_PREFIX}{secrets.token_hex(8)}"
                os.rename(target, doomed)
                displaced.append(doomed)
            except FileNotFoundError:  # deleted meanwhile: the plain rename will do
                continue
        for doomed in displaced:
            shutil.rmtree(doomed, ignore_errors=True)

    def remove(self, name: str) -> None:
        voice = self.get(name)
        doomed = self.directory / f"{_DELETED_PREFIX}{secrets.token_hex(8)}"
        try:
            os.rename(voice.folder, doomed)
        except FileNotFoundError:  # removed by another request meanwhile
            raise UnknownVoice(name) from None
        _fsync_dir(self.directory)
        shutil.rmtree(doomed, ignore_errors=True)

    def sweep(self) -> None:
        """Remove what interrupted writes and deletions left behind."""
        if not self.directory.is_dir():
            return
        for leftover in self.directory.iterdir():
            if leftover.name.startswith((_PENDING_PREFIX, _DELETED_PREFIX)):
                shutil.rmtree(leftover, ignore_errors=True)
            elif leftover.is_dir():
                for partial in leftover.glob(f"{_PENDING_PREFIX}*"):
                    partial.unlink(missing_ok=True)
