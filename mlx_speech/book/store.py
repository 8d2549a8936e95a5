"""The sentences of a book already spoken, kept beside its output so that a
run stopped at any moment (``kill -9`` included) resumes where it was.

Each sentence is one FLAC file named by its key (``plan.Sentence.key``),
24-bit, which is finer than anything a book is written in (16-bit or
lossy), and written whole or not at all: to a temporary name, then renamed.
A sentence spoken as no audio at all (a zero pause, a take the model ended
at once) is an empty ``.empty`` file instead, as FLAC holds no empty
stream. A kept take that is suspect (``takes``) has a ``.suspect`` file
beside it saying why. A kept file that cannot be read is never trusted: it is removed
and its sentence counts as missing, so the next run speaks it again. One
run at a time holds a folder (an exclusive lock on its ``lock`` file,
which the system drops with the process, however it ends).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
from collections.abc import Collection, Mapping
from pathlib import Path

import numpy as np
import soundfile

SUFFIX = ".flac"
EMPTY_SUFFIX = ".empty"
SUSPECT_SUFFIX = ".suspect"  # beside a kept take that is suspect: why
TAKES = "takes.json"  # the chapters spoken again (--redo): chapter index → take


class StoreBusy(RuntimeError):
    """Another run is speaking into the same folder."""


class UnreadableSentence(RuntimeError):
    """A kept sentence's audio could not be read back; it was removed, so
    that the next run speaks it again."""


class SpokenStore:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.folder / "lock", "a")  # noqa: SIM115 - held while open
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise StoreBusy(
                f"another run is speaking into {self.folder}: wait for it to end"
            ) from None
        self._frames: dict[str, int] = {}  # sentences whose files were read, by key

    def close(self) -> None:
        self._lock.close()  # and with it the lock

    def __enter__(self) -> SpokenStore:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def _empty_path(self, key: str) -> Path:
        return self.folder / f"{key}{EMPTY_SUFFIX}"

    def has(self, key: str) -> bool:
        """Whether the sentence is kept and its file reads; one that does not
        read is removed here."""
        if key in self._frames:
            return True
        if self._empty_path(key).is_file():
            self._frames[key] = 0
            return True
        path = self._path(key)
        if not path.is_file():
            return False
        try:
            self._frames[key] = _checked_frames(path)
        except soundfile.SoundFileError:
            path.unlink(missing_ok=True)
            return False
        return True

    def frames(self, key: str) -> int:
        """The sentence's length in samples, read from its header."""
        if not self.has(key):
            raise UnreadableSentence(self._unreadable(key, "it is not kept"))
        return self._frames[key]

    def load(self, key: str) -> np.ndarray:
        """The sentence's samples (none for one without audio); a file that
        no longer reads is removed (``UnreadableSentence``)."""
        frames = self.frames(key)
        if frames == 0:
            return np.zeros(0, np.float32)
        try:
            samples, _ = soundfile.read(str(self._path(key)), dtype="float32")
            if len(samples) != frames:
                raise soundfile.SoundFileError(
                    f"it holds {len(samples)} of its {frames} samples"
                )
        except soundfile.SoundFileError as error:
            self._path(key).unlink(missing_ok=True)
            self._frames.pop(key, None)
            raise UnreadableSentence(self._unreadable(key, str(error))) from None
        return samples

    def save(
        self, key: str, samples: np.ndarray, rate: int, suspect: str | None = None
    ) -> None:
        """Keep a sentence's audio; an error (a full disk) leaves no part of it.
        ``suspect``: why its take is suspect (``takes``), kept beside it first,
        so that audio kept is never without its mark."""
        mark = self._suspect_path(key)
        if suspect is not None:
            _replace_whole(mark, suspect.encode())
        else:
            mark.unlink(missing_ok=True)
        if len(samples) == 0:
            _replace_whole(self._empty_path(key), b"")
        else:
            _replace_whole(self._path(key), _flac(samples, rate))
        self._frames[key] = len(samples)

    def suspects(self) -> dict[str, str]:
        """Why each suspect take is, by its sentence's key: one pass over the
        folder, not a file looked for per sentence."""
        marks = {}
        for path in self.folder.glob(f"*{SUSPECT_SUFFIX}"):
            with contextlib.suppress(OSError):  # removed meanwhile
                marks[path.name.removesuffix(SUSPECT_SUFFIX)] = path.read_text("utf-8")
        return marks

    def _suspect_path(self, key: str) -> Path:
        return self.folder / f"{key}{SUSPECT_SUFFIX}"

    def keep_takes(self, takes: Mapping[int, int]) -> None:
        """Which take of each chapter the runs that follow speak (``redone``)."""
        data = json.dumps({str(index): take for index, take in takes.items() if take})
        _replace_whole(self.folder / TAKES, data.encode())

    def size(self) -> int:
        """Bytes the kept sentences take."""
        return sum(path.stat().st_size for path in self.folder.glob(f"*{SUFFIX}"))

    def _unreadable(self, key: str, why: str) -> str:
        return (
            f"the kept audio of a sentence ({key}{SUFFIX}) could not be read: {why}; "
            "it was removed, and the next run speaks it again"
        )


def kept_takes(folder: Path) -> dict[int, int]:
    """The take of each chapter spoken again in ``folder``'s store; none for
    a store without (or with an unreadable) record."""
    try:
        record = json.loads((folder / TAKES).read_text(encoding="utf-8"))
        return {int(index): int(take) for index, take in dict(record).items()}
    except (OSError, ValueError, TypeError):
        return {}


def redone(takes: Mapping[int, int], chapters: Collection[int]) -> dict[int, int]:
    """``takes`` with each of ``chapters`` one take on (``--redo``)."""
    return {**takes, **{index: takes.get(index, 0) + 1 for index in chapters}}


def _checked_frames(path: Path) -> int:
    """The file's length in samples, its last one read: a file cut short
    fails here (``SoundFileError``), a file that reads whole is trusted."""
    with soundfile.SoundFile(str(path)) as file:
        if file.frames:
            file.seek(file.frames - 1)
            if len(file.read(1)) != 1:
                raise soundfile.SoundFileError("its last sample is missing")
        return file.frames


def _flac(samples: np.ndarray, rate: int) -> bytes:
    """Encoded in memory (a sentence is small), so that a full disk fails a
    plain write, not a libsndfile callback."""
    encoded = io.BytesIO()
    # 24-bit holds [-1, 1]: what is outside would wrap, not clip
    soundfile.write(
        encoded, np.clip(samples, -1.0, 1.0), rate, format="FLAC", subtype="PCM_24"
    )
    return encoded.getvalue()


def _replace_whole(path: Path, data: bytes) -> None:
    """``data`` into a file renamed onto ``path`` once it is on the disk."""
    partial = path.with_suffix(".partial")
    try:
        with open(partial, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
