"""The saved voices' routes: list them with the model's presets, save one
from a clip, remove one."""

from __future__ import annotations

import errno
import logging

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ...errors import InvalidRequest, shown
from ...voices.store import UnknownVoice
from ..bodies import read_voice_upload
from ..errors import ApiError
from .listing import created_voice, removed_voice, voices_listing

log = logging.getLogger("mlx_speech.server")


async def list_voices(request: Request) -> Response:
    state = request.app.state
    presets = state.slot.ready().voices
    saved = await anyio.to_thread.run_sync(state.store.list)
    return JSONResponse(voices_listing(presets, saved))


async def add_voice(request: Request) -> Response:
    state = request.app.state
    tts = state.slot.ready()
    settings = state.settings
    upload = await read_voice_upload(request, settings.max_ref_bytes, settings.body_timeout)
    name = upload.name
    if name.lower() in {preset.lower() for preset in tts.voices}:
        message = f"{shown(name)} is a preset voice of this model"
        raise ApiError(409, message, param="name")
    try:
        voice = await anyio.to_thread.run_sync(
            state.store.add, name, upload.clip, upload.ref_text
        )
    except InvalidRequest as error:
        raise ApiError(400, str(error), param=error.param) from None
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        log.warning("no space left to save voice %s", shown(name))
        message = (
            "no space left on the server's disk to save the voice; nothing was changed"
        )
        raise ApiError(507, message) from None
    log.info("saved voice %s (%.1f s)", voice.name, voice.duration_s)
    return JSONResponse(created_voice(voice), status_code=201)


async def remove_voice(request: Request) -> Response:
    name = request.path_params["name"]
    try:
        await anyio.to_thread.run_sync(request.app.state.store.remove, name)
    except UnknownVoice:
        message = f"no saved voice named {shown(name)}"
        raise ApiError(404, message, param="name") from None
    return JSONResponse(removed_voice(name))


ROUTES = [
    Route("/v1/audio/voices", list_voices, methods=["GET"]),
    Route("/v1/audio/voices", add_voice, methods=["POST"]),
    Route("/v1/audio/voices/{name}", remove_voice, methods=["DELETE"]),
]
