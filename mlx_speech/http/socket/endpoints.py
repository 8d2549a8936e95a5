"""The WebSocket route (vLLM-Omni's streaming protocol): a session per
connection (``session.py``), refused in the OpenAI shape while the model
loads or the server stops; asked as plain HTTP, a 426."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from ...serving.admission import refuse_when_stopping
from ...serving.refusal import Refusal
from ...serving.state import ServerState
from ..errors import ApiError
from ..speech.request import request_rules
from .session import SpeechSocket, refuse


async def speech_socket_over_http(request: Request) -> Response:
    """The socket's route asked as plain HTTP: say how to reach it."""
    raise ApiError(
        426,
        "this route is a WebSocket (vLLM-Omni's streaming protocol): connect "
        "with ws:// (Upgrade: websocket)",
        headers={"Upgrade": "websocket", "Connection": "Upgrade"},
    )


async def speech_socket(websocket: WebSocket) -> None:
    state: ServerState = websocket.app.state
    try:
        refuse_when_stopping(state)
        tts = state.slot.ready()
    except Refusal as refusal:
        await refuse(websocket, ApiError.refused(refusal))
        return
    await SpeechSocket(websocket, tts, state, request_rules(state.settings)).run()


ROUTES = [
    WebSocketRoute("/v1/audio/speech/stream", speech_socket),
    Route("/v1/audio/speech/stream", speech_socket_over_http, methods=["GET"]),
]
