"""Errors answered below the app, in the API's JSON error shape: a request
uvicorn cannot parse (its h11 protocol answers a plain-text 400), and a
WebSocket handshake the websockets library refuses (a plain-text 400, or
the 414/431 of its limits)."""

from __future__ import annotations

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.datastructures import Headers
from websockets.http11 import Response

from .errors import ApiError


def _json_error(status: int, message: str) -> bytes:
    return ApiError(status, message).response().body


class JsonErrorsH11Protocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        # uvicorn's ``msg`` is always "Invalid HTTP request received."
        body = _json_error(400, "not a valid HTTP/1.1 request")
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()


class JsonErrorsWebSocketProtocol(WebSocketsSansIOProtocol):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Every refusal of the handshake, the library's and uvicorn's, is
        # built by the connection's ``reject``.
        plain = self.conn.reject

        def reject(status, text: str) -> Response:
            refused = plain(status, text)
            message = text.strip().rstrip(".") or refused.reason_phrase
            body = _json_error(refused.status_code, message)
            headers = Headers(
                [
                    *(
                        (name, value)
                        for name, value in refused.headers.raw_items()
                        if name.lower() not in ("content-type", "content-length")
                    ),
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(body))),
                ]
            )
            return Response(refused.status_code, refused.reason_phrase, headers, body)

        self.conn.reject = reject
