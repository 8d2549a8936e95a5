"""The OpenAI error shape, in one place."""

from __future__ import annotations

from starlette.responses import JSONResponse

from ..errors import InvalidRequest
from ..serving.refusal import Refusal
from ..voices.resolve import UnknownVoiceName

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    426: "invalid_request_error",
    429: "rate_limit_error",
    499: "invalid_request_error",  # the client left: counted, never received
    500: "server_error",
    503: "service_unavailable_error",
    507: "server_error",
}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @classmethod
    def invalid(cls, error: ValueError) -> ApiError:
        """A request's own fault as HTTP says it: an unknown voice is a 404,
        anything else a 400 naming its field (the text is ``input`` here)."""
        if isinstance(error, UnknownVoiceName):
            return cls(404, str(error), param="voice")
        if isinstance(error, InvalidRequest):
            param = "input" if error.param == "text" else error.param
            return cls(400, str(error), param=param)
        return cls(400, str(error))

    @classmethod
    def refused(cls, refusal: Refusal) -> ApiError:
        """The core's refusal as HTTP says it: 429 when busy, else 503."""
        status = 429 if refusal.reason == "busy" else 503
        headers = {"retry-after": str(refusal.retry_after)}
        return cls(status, refusal.message, headers=headers)

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)

    async def refuse_socket(self, scope: dict, receive, send) -> None:
        """Answer a WebSocket handshake with this error instead of accepting it:
        as an HTTP response where the server can send one, else a close (403)."""
        await receive()  # websocket.connect
        if "websocket.http.response" not in scope.get("extensions", {}):
            reason = self.message[:120]
            await send({"type": "websocket.close", "code": 1008, "reason": reason})
            return
        response = self.response()
        await send(
            {
                "type": "websocket.http.response.start",
                "status": response.status_code,
                "headers": response.raw_headers,
            }
        )
        await send({"type": "websocket.http.response.body", "body": response.body})
