"""The sentences of a book already spoken, kept beside its output so that a
run stopped at any moment (``kill -9`` included) resumes where it was.

Each sentence is one FLAC file named by its key (``plan.Sentence.key``),
24-bit, which is finer than anything a book is written in (16-bit or
lossy), and written whole or not at all: to a temporary name, then renamed.
One run at a time holds a folder (an exclusive lock on its ``lock`` file,
which the system drops with the process, however it ends).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import numpy as np
import soundfile

SUFFIX = ".flac"


class StoreBusy(RuntimeError):
    """Another run is speaking into the same folder."""


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

    def close(self) -> None:
        self._lock.close()  # and with it the lock

    def __enter__(self) -> SpokenStore:
        return self

    def __exit__(self, *_) -> None:
        self.close()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def has(self, key: str) -> bool:
        return self._path(key).is_file()

    def frames(self, key: str) -> int:
        """The sentence's length in samples, read from its header."""
        return soundfile.info(str(self._path(key))).frames

    def load(self, key: str) -> np.ndarray:
        samples, _ = soundfile.read(str(self._path(key)), dtype="float32")
        return samples

    def save(self, key: str, samples: np.ndarray, rate: int) -> None:
        """Keep a sentence's audio; an error (a full disk) leaves no part of it."""
        path = self._path(key)
        partial = path.with_suffix(".partial")
        try:
            with open(partial, "wb") as file:
                # 24-bit holds [-1, 1]: what is outside would wrap, not clip
                soundfile.write(
                    file, np.clip(samples, -1.0, 1.0), rate, format="FLAC", subtype="PCM_24"
                )
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    def size(self) -> int:
        """Bytes the kept sentences take."""
        return sum(path.stat().st_size for path in self.folder.glob(f"*{SUFFIX}"))
