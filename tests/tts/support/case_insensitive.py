"""A directory that opens and stats as on a case-insensitive volume
(macOS's default APFS): a name in another case reaches the entry listed.
This machine's filesystems have no case folding, so the volume is
imitated where the store reaches it: ``open`` and ``stat``."""

from __future__ import annotations

import io
import os
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def case_insensitive(root: Path, monkeypatch):
    real_open, real_stat = io.open, os.stat

    def folded(path):
        if not isinstance(path, str | os.PathLike):
            return path  # a file descriptor
        target = Path(path)
        if not target.is_relative_to(root) or target == root:
            return path
        first, *rest = target.relative_to(root).parts
        for entry in os.listdir(root):
            if entry.lower() == first.lower():
                return root.joinpath(entry, *rest)
        return path

    monkeypatch.setattr(io, "open", lambda path, *a, **k: real_open(folded(path), *a, **k))
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: real_stat(folded(path), *a, **k))
    yield
