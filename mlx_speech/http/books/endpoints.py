"""The book job routes (``/v1/audio/books``): a long text or a book file
spoken in the background into one chaptered audiobook, its progress read,
its audio and captions downloaded, the job cancelled or deleted. The jobs
themselves are the serving core's (``serving.books``); here they are parsed,
rendered as JSON and their errors said in HTTP's words. Their work on disk
runs on the thread pool, never on the event loop."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from ...audio.chapters import book_media_type
from ...book.files import file_name
from ...book.source import MAX_BOOK_BYTES, BookError
from ...errors import shown
from ...serving.book_job import BookJob
from ...serving.books import (
    BookJobs,
    BookJobsFull,
    BookNotDone,
    BooksFolderBusy,
    UnknownBookJob,
)
from ..bodies import BookUpload, read_book_body
from ..errors import ApiError
from ..speech.request import RequestRules
from .request import book_too_large, parse_book_request

T = TypeVar("T")

BOOKS_PATH = "/v1/audio/books"
FOLDER_BUSY_RETRY_SECONDS = 60


async def create_book(request: Request) -> Response:
    state = request.app.state
    settings = state.settings
    tts = state.slot.ready()
    body = await read_book_body(
        request, MAX_BOOK_BYTES, settings.body_timeout, book_too_large("file")
    )
    rules = RequestRules(
        max_ref_bytes=settings.max_ref_bytes, media_root=settings.allowed_local_media_path
    )
    order = await anyio.to_thread.run_sync(parse_book_request, body, rules)
    source = "file" if isinstance(body, BookUpload) else "input"
    job = await _books(request, state.books.create, tts, order, source=source)
    headers = {"location": f"{BOOKS_PATH}/{job.id}"}
    return JSONResponse(book_object(job), status_code=202, headers=headers)


async def list_books(request: Request) -> Response:
    jobs = await _books(request, request.app.state.books.list)
    return JSONResponse({"object": "list", "data": [book_object(job) for job in jobs]})


async def get_book(request: Request) -> Response:
    job = await _books(request, request.app.state.books.get, request.path_params["id"])
    return JSONResponse(book_object(job))


async def cancel_book(request: Request) -> Response:
    job = await _books(request, request.app.state.books.cancel, request.path_params["id"])
    return JSONResponse(book_object(job))


async def delete_book(request: Request) -> Response:
    job_id = request.path_params["id"]
    await _books(request, request.app.state.books.delete, job_id)
    return JSONResponse({"id": job_id, "object": "audio.book.deleted", "deleted": True})


async def book_audio(request: Request) -> Response:
    job, audio = await _download(request, captions=False)
    audio_format = job.response_format
    headers = {"content-disposition": _attachment(f"{_download_stem(job)}.{audio_format}")}
    return _LinkResponse(audio, media_type=book_media_type(audio_format), headers=headers)


async def book_captions(request: Request) -> Response:
    job, captions = await _download(request, captions=True)
    headers = {"content-disposition": _attachment(f"{_download_stem(job)}.vtt")}
    return _LinkResponse(captions, media_type="text/vtt", headers=headers)


class _LinkResponse(FileResponse):
    """A file sent from a download's own link, removed once sent or not."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await anyio.to_thread.run_sync(BookJobs.downloaded, Path(self.path))


def book_object(job: BookJob) -> dict[str, Any]:
    """A job as clients read it."""
    done = job.status == "done"
    path = f"{BOOKS_PATH}/{job.id}"
    return {
        "id": job.id,
        "object": "audio.book",
        "status": job.status,
        "created_at": int(job.created),
        "started_at": None if job.started is None else int(job.started),
        "finished_at": None if job.finished is None else int(job.finished),
        "title": job.title,
        "author": job.author,
        "source": job.source,
        "response_format": job.response_format,
        "chapters": job.chapters,
        "chapters_asked": job.chapters_asked,
        "footnotes": job.footnotes,
        "loudness": job.loudness,
        "dialogue_voice": job.dialogue_voice,
        "retakes": job.retakes,
        "suspects": job.suspects,
        "contents": [
            {
                "number": chapter["number"],
                "title": chapter["title"],
                "sentences": chapter["sentences"],
                "estimated_minutes": round(chapter["minutes"], 1),
            }
            for chapter in job.contents
        ],
        "left_out": job.left_out,
        "sentences": {"done": job.spoken, "total": job.sentences},
        "audio_seconds": round(job.audio_seconds, 3),
        "error": job.error,
        "audio_url": f"{path}/audio" if done else None,
        "captions_url": f"{path}/captions" if done else None,
    }


async def _download(request: Request, captions: bool) -> tuple[BookJob, Path]:
    """The job and a link to its file; 409 unless it is done."""
    books = request.app.state.books
    try:
        return await _books(request, books.download, request.path_params["id"], captions)
    except BookNotDone as not_done:
        job = not_done.job
        progress = f"{job.spoken} of {job.sentences} sentences spoken"
        after = (
            "it is not run again: create the job again for its audio"
            if job.status in ("cancelled", "failed")
            else "its audio and captions are there once it is done"
        )
        raise ApiError(
            409,
            f"book job {job.id} is {job.status} ({progress}); {after}",
        ) from None


async def _books(
    request: Request, call: Callable[..., T], *args: Any, source: str = "input"
) -> T:
    """``call`` on the thread pool, its errors as HTTP says them; ``source``
    names the field that held the book."""
    try:
        return await anyio.to_thread.run_sync(call, *args)
    except UnknownBookJob as error:
        raise ApiError(404, f"no book job {shown(error.args[0])}", param="id") from None
    except BookJobsFull as error:
        raise ApiError(429, str(error)) from None
    except BooksFolderBusy as error:
        headers = {"retry-after": str(FOLDER_BUSY_RETRY_SECONDS)}
        raise ApiError(503, str(error), headers=headers) from None
    except BookError as error:
        raise ApiError(400, str(error), param=source) from None
    except ValueError as error:
        raise ApiError.invalid(error) from None
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise ApiError(
            507, "no space left on the server's disk to keep the book; no job was made"
        ) from None


def _download_stem(job: BookJob) -> str:
    return file_name(job.title or PurePath(job.source).stem, "book")


def _attachment(name: str) -> str:
    """A download's Content-Disposition (RFC 6266): the name in ASCII for
    every client, and in UTF-8 for those that read it."""
    plain = name.encode("ascii", "replace").decode().replace("?", "_")
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name)}"


ROUTES = [
    Route("/v1/audio/books", create_book, methods=["POST"]),
    Route("/v1/audio/books", list_books, methods=["GET"]),
    Route("/v1/audio/books/{id}", get_book, methods=["GET"]),
    Route("/v1/audio/books/{id}", delete_book, methods=["DELETE"]),
    Route("/v1/audio/books/{id}/audio", book_audio, methods=["GET"]),
    Route("/v1/audio/books/{id}/captions", book_captions, methods=["GET"]),
    Route("/v1/audio/books/{id}/cancel", cancel_book, methods=["POST"]),
]
