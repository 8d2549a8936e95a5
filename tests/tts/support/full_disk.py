"""A disk that fills up while a book is spoken: the sentence store's writes
fail with ENOSPC once it has kept ``kept`` sentences' audio (a suspect
take's mark, written before its audio, counts for nothing)."""

from __future__ import annotations

import errno
import os

from mlx_speech.book import store


def fill_after(monkeypatch, kept: int) -> None:
    real_replace, saved = store._replace_whole, []

    def fills_up(path, data):
        if len(saved) == kept:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if path.suffix in (store.SUFFIX, store.EMPTY_SUFFIX):
            saved.append(path)
        real_replace(path, data)

    monkeypatch.setattr(store, "_replace_whole", fills_up)
