"""A disk that fills up while a book is spoken: the sentence store's writes
fail with ENOSPC once it has kept ``kept`` sentences."""

from __future__ import annotations

import errno
import os

import soundfile

from mlx_speech.book import store


def fill_after(monkeypatch, kept: int) -> None:
    real_write, saved = soundfile.write, []

    def fills_up(file, *rest, **options):
        if len(saved) == kept:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        saved.append(file)
        real_write(file, *rest, **options)

    monkeypatch.setattr(store.soundfile, "write", fills_up)
