"""A book job as the server keeps it: what was asked and where it stands
(``BookJob``), and its ``job.json``, which is rewritten whole (a temporary
file renamed over it), so that a crash leaves the old record or the new.

A job is a folder ``<id>/`` of the books folder: ``job.json``, the book as
it was sent (``source.<ext>``), its spoken sentences (``spoken/``, a
``SpokenStore``) and, once done, ``book.<format>`` and ``captions.vtt``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path, PurePath

from ..book.takes import DEFAULT_RETAKES
from ..request import SpeechRequest

ID_PATTERN = re.compile(r"book_[0-9a-f]{24}")
RECORD = "job.json"


@dataclass(frozen=True)
class BookJob:
    id: str
    created: float  # Unix seconds
    source: str  # the book's file name: the upload's, or made for a text sent as JSON
    response_format: str  # one of ``audio.chapters.BOOK_FORMATS``
    request: SpeechRequest  # the voice and options; its text is empty
    title: str | None  # as asked, else the book's own
    author: str | None
    chapters: int  # those that say something
    sentences: int
    status: str = "queued"  # then speaking, writing, done; or failed, or cancelled
    spoken: int = 0  # sentences kept so far
    audio_seconds: float = 0.0  # their audio
    started: float | None = None  # first began to speak
    finished: float | None = None  # done, failed or cancelled
    error: str | None = None  # why it failed: one line
    chapters_asked: str | None = None  # those to speak ("3-5,7"), else every one
    footnotes: str = "skip"  # or "chapter-end"
    loudness: float | None = -18.0  # LUFS each chapter is brought to; None: as spoken
    dialogue_voice: str | None = None  # the voice of what the book quotes
    contents: list = dataclasses.field(default_factory=list)  # book_contents, as dicts
    left_out: list = dataclasses.field(default_factory=list)  # Book.left_out
    retakes: int = DEFAULT_RETAKES  # a suspect take spoken again up to this often
    suspects: list = dataclasses.field(default_factory=list)  # Suspect.as_dict()s


def new_job_id() -> str:
    return "book_" + secrets.token_hex(12)


def source_path(folder: Path, job: BookJob) -> Path:
    """Where the book as sent is kept; its suffix says its kind."""
    return folder / f"source{PurePath(job.source).suffix.lower()}"


def write_job(folder: Path, job: BookJob) -> None:
    """``job.json`` replaced whole (fsynced, then renamed over the old)."""
    record = dataclasses.asdict(job)
    record["request"] = _request_fields(job.request)
    partial = folder / f".{RECORD}.partial"
    with open(partial, "w", encoding="utf-8") as file:
        json.dump(record, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, folder / RECORD)


def read_job(folder: Path) -> BookJob:
    """The job kept in ``folder``; ``OSError`` or ``ValueError`` (``TypeError``
    too, for a record of other fields) if it cannot be read."""
    record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    record["request"] = SpeechRequest(**record["request"])
    job = BookJob(**record)
    if job.id != folder.name:
        raise ValueError(f"{folder / RECORD} names another job, {job.id!r}")
    return job


def _request_fields(request: SpeechRequest) -> dict:
    """Every field but the text, which a job's request has none of."""
    fields = {
        field.name: getattr(request, field.name)
        for field in dataclasses.fields(SpeechRequest)
        if field.name != "text"
    }
    fields["sampling"] = dict(request.sampling)
    return fields
