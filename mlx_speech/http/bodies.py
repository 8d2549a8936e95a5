"""Reading request bodies within their size and time limits: JSON, voice
uploads and book uploads.

A body must arrive whole within ``timeout`` seconds of the request's
headers; else the answer is 408 and the connection is closed (so a client
that sends headers and a few bytes, then stalls, holds its connection only
that long, and a slow drip cannot keep it either). A client that closes its
connection before its body arrived is no server error: it is counted as 499
(nginx's "client closed request"), and no answer is sent. A body still
arriving when a stopping server's deadline passes gets 503 and the
connection is closed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect, Request

from ..errors import shown
from ..serving.shutdown import STOPPING
from .errors import ApiError

_MULTIPART_OVERHEAD = 64 * 1024  # form fields and part headers beside the clip


@dataclass(frozen=True)
class VoiceUpload:
    name: str
    clip: bytes
    ref_text: str | None


@dataclass(frozen=True)
class BookUpload:
    name: str  # the file's name as sent
    data: bytes
    fields: dict[str, str]  # the form's other fields


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def _declared_length(request: Request) -> int | None:
    declared = request.headers.get("content-length")
    return int(declared) if declared and declared.isdigit() else None


@asynccontextmanager
async def _within(request: Request, timeout: float) -> AsyncIterator[None]:
    """The body's reading, bounded by ``timeout`` seconds and by the
    deadline of a stopping server (``Shutdown.bodies``)."""
    shutdown = request.app.state.shutdown
    with anyio.CancelScope() as reading:
        shutdown.bodies.add(reading)
        try:
            with anyio.fail_after(timeout):
                yield
        except ClientDisconnect:
            raise ApiError(
                499, "the client closed the connection before its body arrived"
            ) from None
        except TimeoutError:
            raise ApiError(
                408,
                f"the request body did not arrive within {timeout:g} seconds",
                param="body",
                headers={"Connection": "close"},  # the rest of it is never read
            ) from None
        finally:
            shutdown.bodies.discard(reading)
    if reading.cancelled_caught:
        raise ApiError(503, STOPPING, headers={"Connection": "close", "Retry-After": "5"})


async def read_json(request: Request, limit: int, timeout: float) -> Any:
    if _content_type(request) != "application/json":
        raise ApiError(415, "send the request as JSON (Content-Type: application/json)")
    too_large = ApiError(413, f"the request body is larger than {limit} bytes")
    declared = _declared_length(request)
    if declared is not None and declared > limit:
        raise too_large
    body = bytearray()
    async with _within(request, timeout):
        async for part in request.stream():
            body.extend(part)
            if len(body) > limit:
                raise too_large
    try:
        return json.loads(body)
    except RecursionError:
        raise ApiError(400, "the request body nests too deeply", param="body") from None
    except ValueError as error:  # bad JSON or UTF-8, or an integer of 4,300+ digits
        raise ApiError(
            400, f"the request body is not valid JSON: {error}", param="body"
        ) from None


class _NotUtf8(MultiPartException):
    def __init__(self, field: str, byte: int):
        super().__init__(f"the field {shown(field)} is not UTF-8 text (byte {byte})")
        self.field = field


class _Utf8FieldsParser(MultiPartParser):
    """Starlette's multipart parser, refusing a text field that is not UTF-8
    (Starlette reads it as Latin-1, which would store mojibake)."""

    def on_part_end(self) -> None:
        part = self._current_part
        if part.file is None:
            try:
                bytes(part.data).decode("utf-8")
            except UnicodeDecodeError as error:
                raise _NotUtf8(part.field_name, error.start) from None
        super().on_part_end()


async def read_voice_upload(
    request: Request, max_clip_bytes: int, timeout: float
) -> VoiceUpload:
    """``multipart/form-data`` with ``name``, ``audio_sample`` (a file) and
    optionally ``ref_text``."""
    if _content_type(request) != "multipart/form-data":
        raise ApiError(415, "upload voices as multipart/form-data")
    too_large = ApiError(
        413, f"the clip is larger than {max_clip_bytes} bytes", param="audio_sample"
    )
    declared = _declared_length(request)
    if declared is not None and declared > max_clip_bytes + _MULTIPART_OVERHEAD:
        raise too_large
    async with _within(request, timeout), aclosing(request.stream()) as stream:
        form = await _form(request, stream, max_fields=8, max_part_size=max_clip_bytes)
    try:
        return await _voice_upload(form, max_clip_bytes, too_large)
    finally:
        await form.close()


async def read_book_body(
    request: Request, max_book_bytes: int, timeout: float, too_large: ApiError
) -> Any | BookUpload:
    """A book job's body: JSON (the book's text a field of it), or a
    multipart form with the book as a file; ``too_large`` once the book
    passes ``max_book_bytes`` (as a file) or the body its bound."""
    kind = _content_type(request)
    if kind == "multipart/form-data":
        return await _read_book_upload(request, max_book_bytes, timeout, too_large)
    if kind == "application/json":
        # A JSON string may spell a byte of UTF-8 in up to three (é is \u00e9).
        limit = 3 * max_book_bytes + _MULTIPART_OVERHEAD
        return await read_json(request, limit, timeout)
    raise ApiError(
        415,
        "send a book as JSON with its text (Content-Type: application/json), or as "
        "a file in multipart/form-data",
    )


async def _read_book_upload(
    request: Request, max_file_bytes: int, timeout: float, too_large: ApiError
) -> BookUpload:
    """``multipart/form-data`` with ``file`` (a file, its name sent) and
    text fields."""
    declared = _declared_length(request)
    limit = max_file_bytes + _MULTIPART_OVERHEAD
    if declared is not None and declared > limit:
        raise too_large
    bounded = _bounded(request.stream(), limit, too_large)
    async with _within(request, timeout), aclosing(bounded) as stream:
        form = await _form(
            request, stream, max_fields=32, max_part_size=_MULTIPART_OVERHEAD
        )
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile) or not upload.filename:
            raise ApiError(
                400, "file (a book file, with its name) is required", param="file"
            )
        data = await upload.read(max_file_bytes + 1)
        if len(data) > max_file_bytes:
            raise too_large
        fields = {key: value for key, value in form.multi_items() if isinstance(value, str)}
        return BookUpload(upload.filename, data, fields)
    finally:
        await form.close()


async def _form(
    request: Request, stream: AsyncIterator[bytes], *, max_fields: int, max_part_size: int
) -> FormData:
    """The multipart body parsed: one file at most, text fields in UTF-8."""
    try:
        parser = _Utf8FieldsParser(
            request.headers,
            stream,
            max_files=1,
            max_fields=max_fields,
            max_part_size=max_part_size,
        )
        return await parser.parse()
    except _NotUtf8 as error:
        raise ApiError(400, error.message, param=error.field[:64]) from None
    except MultiPartException as error:
        raise ApiError(400, f"bad multipart body: {error.message}") from None


async def _bounded(
    stream: AsyncIterable[bytes], limit: int, too_large: ApiError
) -> AsyncIterator[bytes]:
    """``stream``, refused once more than ``limit`` bytes came (a body sent
    without its length, or with a false one)."""
    received = 0
    async for part in stream:
        received += len(part)
        if received > limit:
            raise too_large
        yield part


async def _voice_upload(
    form: FormData, max_clip_bytes: int, too_large: ApiError
) -> VoiceUpload:
    upload = form.get("audio_sample")
    if not isinstance(upload, UploadFile):
        raise ApiError(400, "audio_sample (a file) is required", param="audio_sample")
    clip = await upload.read(max_clip_bytes + 1)
    if len(clip) > max_clip_bytes:
        raise too_large
    name = form.get("name")
    if not isinstance(name, str):
        raise ApiError(400, "name is required", param="name")
    ref_text = form.get("ref_text")
    if ref_text is not None and not isinstance(ref_text, str):
        raise ApiError(400, "ref_text must be text", param="ref_text")
    return VoiceUpload(name, clip, ref_text)
