"""The book jobs of one server: long texts spoken in the background into
chaptered audiobooks, kept in a folder so that they survive a restart.

A request creates a job (checked at once: the book reads, its voice and
options are the model's) and reads, cancels or deletes it; the jobs'
runner, one thread of its own, speaks them one at a time in the order they
were made, with half of the engine's places (the other half stays for live
speech), once the model is loaded. Where a job stands is kept in memory and
written to its ``job.json`` at each status and every few seconds of
progress. Jobs that were queued or running when the server stopped are
queued again when it starts, their kept sentences reused. One server at a
time holds a books folder (an exclusive lock on its ``lock`` file).
"""

from __future__ import annotations

import fcntl
import logging
import os
import secrets
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path, PurePath
from typing import Any, TextIO

from ..audio.chapters import check_chapter_count
from ..book.contents import book_contents, chosen_chapters
from ..book.source import Book, book_of
from ..book.speaker import BookCancelled
from ..book.speech import BookSpeech
from ..book.takes import DEFAULT_RETAKES
from ..engine import Engine
from ..errors import InvalidRequest
from ..request import SpeechRequest
from ..tts import TTS
from ..voices.store import default_voices_dir
from .book_job import (
    ID_PATTERN,
    BookJob,
    new_job_id,
    read_job,
    source_path,
    write_job,
)
from .book_run import AUDIO_NAME, CAPTIONS_NAME, failure, run_book_job, titled
from .slot import ModelSlot

log = logging.getLogger("mlx_speech.server")

PROGRESS_WRITE_SECONDS = 2.0  # the longest job.json lags behind a job's progress
MODEL_WAIT_SECONDS = 0.5  # how often the runner looks for the loaded model
RELEASE_SECONDS = 30.0  # the longest a cancel, a delete or a stop waits for the runner
_PENDING_PREFIX = ".pending-"
_DELETED_PREFIX = ".deleted-"
_DOWNLOADS = ".downloads"  # links to files being sent


def default_books_dir() -> Path:
    """Beside the saved voices' per-user folder."""
    return default_voices_dir().with_name("books")


@dataclass(frozen=True)
class BookOrder:
    """What a client asks of a new job."""

    source: bytes  # the book, as sent
    source_name: str  # its file name, whose suffix says its kind
    title: str | None  # instead of the book's own
    response_format: str  # one of ``audio.chapters.BOOK_FORMATS``
    request: SpeechRequest  # the voice and options; its text is not read
    chapters: str | None = None  # those to speak ("3-5,7"), else every one
    footnotes: str = "skip"  # or "chapter-end"
    loudness: float | None = -18.0  # LUFS, or None to leave the audio as spoken
    dialogue_voice: str | None = None  # the voice of what the book quotes
    retakes: int = DEFAULT_RETAKES  # a suspect take spoken again up to this often


class UnknownBookJob(KeyError):
    """No job has that id."""


class BookNotDone(RuntimeError):
    """Its audio and captions are not there: the job is not done."""

    def __init__(self, job: BookJob):
        super().__init__(job.id)
        self.job = job


class BookJobsFull(RuntimeError):
    """``max_books`` jobs are kept already."""


class BooksFolderBusy(RuntimeError):
    """Another server holds the books folder."""


@dataclass
class _Running:
    """The job on the runner, and how it is stopped."""

    id: str
    book: Book | None  # as read when the job was made; None: read from its folder
    stop: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False  # stopped by a client (else by the server's stop)
    released: threading.Event = field(default_factory=threading.Event)


class BookJobs:
    def __init__(self, folder: Path, max_books: int, slot: ModelSlot, engine: Engine):
        self.folder = folder
        self.max_books = max_books
        self._slot = slot
        self._engine = engine
        self._lock = threading.Condition()  # the jobs, and the runner's wakeup
        self._jobs: dict[str, BookJob] = {}
        self._read: dict[str, Book] = {}  # books made by this server, not yet run
        self._creating = 0  # places taken by jobs being created
        self._written: dict[str, float] = {}  # job → when its job.json was written
        self._running: _Running | None = None
        self._closing = False
        self._hold: TextIO | None = None  # the folder's lock, once held
        self._runner = threading.Thread(target=self._run, name="book-jobs", daemon=True)

    # The server's life

    def start(self) -> None:
        """Read the jobs kept (if the folder exists) and start the runner."""
        with self._lock:
            try:
                self._open_if_kept()
            except (BooksFolderBusy, OSError) as error:  # said again by each request
                log.warning("book jobs in %s: %s", self.folder, error)
        self._runner.start()

    def stop(self) -> None:
        """Stop the job in flight (it resumes at the next start) and the runner,
        and let the folder go."""
        with self._lock:
            self._closing = True
            if self._running is not None:
                self._running.stop.set()
            self._lock.notify_all()
        if self._runner.is_alive():
            self._runner.join(RELEASE_SECONDS)
            if self._runner.is_alive():
                log.warning("the book job in flight went on past %g s", RELEASE_SECONDS)
        with self._lock:
            if self._hold is not None:
                self._hold.close()  # and with it the lock
                self._hold = None

    # What requests do

    def create(self, tts: TTS, order: BookOrder) -> BookJob:
        """A new job, queued, once its book and request are checked
        (``BookError``, ``ValueError``) and kept on disk (``OSError``)."""
        with self._lock:
            self._open_if_kept(create=True)
            if len(self._jobs) + self._creating >= self.max_books:
                raise BookJobsFull(
                    f"{self.max_books} book jobs are kept; delete finished ones "
                    "(DELETE /v1/audio/books/{id})"
                )
            self._creating += 1
        try:
            job, book = self._checked_job(tts, order)
            self._keep(job, order.source)
        except BaseException:
            with self._lock:
                self._creating -= 1
            raise
        with self._lock:
            self._creating -= 1  # and its place taken, at once
            self._jobs[job.id] = job
            self._read[job.id] = book  # read once: the runner speaks it as it is
            self._lock.notify_all()
        log.info("book job %s: %s, %d sentences", job.id, job.source, job.sentences)
        return job

    def list(self) -> list[BookJob]:
        """Every job, the newest first."""
        with self._lock:
            self._open_if_kept()
            return sorted(self._jobs.values(), key=lambda job: job.created, reverse=True)

    def get(self, job_id: str) -> BookJob:
        with self._lock:
            self._open_if_kept()
            return self._job(job_id)

    def cancel(self, job_id: str) -> BookJob:
        """A queued job is cancelled at once, a running one once it has
        stopped; a finished one is left as it is."""
        with self._lock:
            self._open_if_kept()
            job = self._job(job_id)
            running = self._stop_running(job_id)
            if running is None:
                if job.status == "queued":
                    self._update(job_id, status="cancelled", finished=time.time())
                    self._read.pop(job_id, None)
                return self._jobs[job_id]
        running.released.wait(RELEASE_SECONDS)
        with self._lock:
            return self._jobs.get(job_id, job)

    def delete(self, job_id: str) -> None:
        """Cancel the job if it runs, then remove its folder."""
        with self._lock:
            self._open_if_kept()
            self._job(job_id)
            del self._jobs[job_id]  # its runner's updates now go nowhere
            self._read.pop(job_id, None)
            self._written.pop(job_id, None)
            running = self._stop_running(job_id)
        if running is not None:
            running.released.wait(RELEASE_SECONDS)
        _remove(self.folder, self.folder / job_id)

    def download(self, job_id: str, captions: bool = False) -> tuple[BookJob, Path]:
        """A done job's audio (or captions) as a link of its own, which stays
        whole however the job is deleted meanwhile; the caller removes it
        once sent (``downloaded``). ``BookNotDone`` unless it is done."""
        with self._lock:
            self._open_if_kept()
            job = self._job(job_id)
            if job.status != "done":
                raise BookNotDone(job)
            folder = self.folder / job.id
            name = CAPTIONS_NAME if captions else f"{AUDIO_NAME}.{job.response_format}"
            downloads = self.folder / _DOWNLOADS
            downloads.mkdir(exist_ok=True)
            link = downloads / f"{secrets.token_hex(8)}-{name}"
            try:
                os.link(folder / name, link)
            except FileNotFoundError:  # removed by hand
                raise UnknownBookJob(job_id) from None
        return job, link

    @staticmethod
    def downloaded(link: Path) -> None:
        link.unlink(missing_ok=True)

    # Under the lock

    def _job(self, job_id: str) -> BookJob:
        job = self._jobs.get(job_id) if ID_PATTERN.fullmatch(job_id) else None
        if job is None:
            raise UnknownBookJob(job_id)
        return job

    def _stop_running(self, job_id: str) -> _Running | None:
        running = self._running
        if running is None or running.id != job_id:
            return None
        running.cancelled = True
        running.stop.set()
        return running

    def _open_if_kept(self, create: bool = False) -> None:
        """The folder held, its jobs read, once: where it exists, or to
        ``create`` a job in it."""
        if self._hold is not None or not (create or self.folder.is_dir()):
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        hold = open(self.folder / "lock", "a")  # noqa: SIM115 - held while open
        try:
            fcntl.flock(hold, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            hold.close()
            # said to clients, so it names no folder of the server's
            raise BooksFolderBusy(
                "another server keeps its book jobs in this server's books folder: "
                "give each server its own --books-dir"
            ) from None
        try:
            self._jobs = self._kept_jobs()
        except BaseException:
            hold.close()
            raise
        self._hold = hold
        self._lock.notify_all()

    def _kept_jobs(self) -> dict[str, BookJob]:
        """The jobs in the folder, the unfinished queued again; what an
        interrupted creation, deletion or download left is removed."""
        jobs = {}
        for entry in self.folder.iterdir():
            if entry.name.startswith((_PENDING_PREFIX, _DELETED_PREFIX, _DOWNLOADS)):
                shutil.rmtree(entry, ignore_errors=True)
            elif ID_PATTERN.fullmatch(entry.name):
                try:
                    job = read_job(entry)
                except (OSError, ValueError, TypeError) as error:
                    log.warning("cannot read book job %s: %s", entry.name, error)
                    continue
                jobs[job.id] = job
        for job in jobs.values():
            if job.status in ("speaking", "writing"):  # stopped with the server
                jobs[job.id] = replace(job, status="queued")
                self._save(jobs[job.id])
        return jobs

    def _update(self, job_id: str, **changes: Any) -> None:
        """A job's fields changed: kept in memory, and in its job.json at a
        new status or every ``PROGRESS_WRITE_SECONDS``."""
        job = self._jobs.get(job_id)
        if job is None:
            return  # deleted meanwhile
        changed = self._jobs[job_id] = replace(job, **changes)
        now = time.monotonic()
        last = self._written.get(job_id, -PROGRESS_WRITE_SECONDS)
        if changed.status != job.status or now - last >= PROGRESS_WRITE_SECONDS:
            self._written[job_id] = now
            self._save(changed)

    def _save(self, job: BookJob) -> None:
        """A full disk must not stop the runner: the job in memory stays
        right, and its kept sentences say where it was."""
        try:
            write_job(self.folder / job.id, job)
        except OSError as error:
            log.warning("cannot save book job %s: %s", job.id, error)

    # Outside the lock

    def _checked_job(self, tts: TTS, order: BookOrder) -> tuple[BookJob, Book]:
        book = titled(
            book_of(order.source, order.source_name, footnotes=order.footnotes),
            order.title,
        )
        try:
            chosen = chosen_chapters(order.chapters, len(book.chapters))
        except ValueError as error:
            raise InvalidRequest("chapters", str(error)) from None
        speech = BookSpeech(
            tts,
            book,
            order.request,
            chapters=chosen,
            dialogue_voice=order.dialogue_voice,
            retakes=order.retakes,
        )
        chapters = len(speech.chapter_sentences())
        check_chapter_count(order.response_format, chapters)
        job = BookJob(
            id=new_job_id(),
            created=time.time(),
            source=PurePath(order.source_name).name,
            response_format=order.response_format,
            request=order.request,
            title=book.title,
            author=book.author,
            chapters=chapters,
            sentences=len(speech.sentences),
            chapters_asked=order.chapters,
            footnotes=order.footnotes,
            loudness=order.loudness,
            dialogue_voice=order.dialogue_voice,
            retakes=order.retakes,
            contents=[asdict(chapter) for chapter in book_contents(book)],
            left_out=list(book.left_out),
        )
        return job, book

    def _keep(self, job: BookJob, source: bytes) -> None:
        """The job's folder, made under a temporary name and renamed into
        place: a crash leaves no half job."""
        pending = self.folder / f"{_PENDING_PREFIX}{job.id}"
        pending.mkdir()
        try:
            with open(source_path(pending, job), "wb") as file:
                file.write(source)
                file.flush()
                os.fsync(file.fileno())
            write_job(pending, job)
            os.rename(pending, self.folder / job.id)
        except BaseException:
            shutil.rmtree(pending, ignore_errors=True)
            raise

    # The runner

    def _run(self) -> None:
        while (next_job := self._next()) is not None:
            tts, job, running = next_job
            try:
                self._run_job(tts, job, running)
            finally:
                with self._lock:
                    self._running = None
                    running.released.set()

    def _next(self) -> tuple[TTS, BookJob, _Running] | None:
        """The oldest queued job, once the model is loaded; None once stopping."""
        with self._lock:
            while not self._closing:
                tts = self._slot.tts
                queued = [job for job in self._jobs.values() if job.status == "queued"]
                if tts is not None and queued:
                    job = min(queued, key=lambda job: job.created)
                    self._running = _Running(job.id, self._read.pop(job.id, None))
                    return tts, job, self._running
                self._lock.wait(MODEL_WAIT_SECONDS if tts is None else None)
            return None

    def _run_job(self, tts: TTS, job: BookJob, running: _Running) -> None:
        update = partial(self._locked_update, job.id)
        # the engine's other half stays free for live requests
        in_flight = max(1, self._engine.max_active // 2)
        folder = self.folder / job.id
        try:
            run_book_job(
                tts,
                folder,
                job,
                update,
                book=running.book,
                in_flight=in_flight,
                stop=running.stop,
            )
        except BookCancelled:
            if running.cancelled:
                update(status="cancelled", finished=time.time())
            # else the server is stopping: the job resumes at its next start
        except Exception as error:  # noqa: BLE001 - the job's to report, not the runner's
            with self._lock:
                job = self._jobs.get(job.id, job)
            unexpected = not isinstance(error, ValueError | OSError)
            log.error("book job %s failed: %s", job.id, error, exc_info=unexpected)
            said = failure(error, job, self.folder)
            update(status="failed", finished=time.time(), error=said)
        else:
            log.info("book job %s done", job.id)

    def _locked_update(self, job_id: str, **changes: Any) -> None:
        with self._lock:
            self._update(job_id, **changes)


def _remove(root: Path, folder: Path) -> None:
    """Renamed away first, so that a crash mid-way leaves no half job."""
    doomed = root / f"{_DELETED_PREFIX}{folder.name}"
    try:
        os.rename(folder, doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)
