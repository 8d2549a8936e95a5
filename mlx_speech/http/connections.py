"""Connection limits uvicorn does not set: how many connections may be open,
and how long a client may take to send a request's headers.

uvicorn times out a connection only when it is idle after a response; one
that never finishes its headers (a slow or stalled client) stays open, and
enough of them exhaust the server. ``guarded_protocol`` is uvicorn's h11
protocol with both bounds added (and its errors in JSON,
``protocol_errors``); everything else is uvicorn's own. A
connection upgraded to a WebSocket leaves the header timer: its session's
own idle rule (``--socket-idle-timeout``) governs it from then on.
"""

from __future__ import annotations

import asyncio

from .protocol_errors import JsonErrorsH11Protocol


def guarded_protocol(
    header_timeout: float, max_connections: int
) -> type[JsonErrorsH11Protocol]:
    class GuardedH11Protocol(JsonErrorsH11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._header_timer: asyncio.TimerHandle | None = None
            if len(self.connections) > max_connections:
                transport.close()  # refused: no request of it is read
                return
            self._arm_header_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._upgraded() or not self._awaiting_request():
                self._cancel_header_timer()
            else:
                self._arm_header_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_timer()
            super().connection_lost(exc)

        def _upgraded(self) -> bool:
            """The connection now belongs to uvicorn's WebSocket protocol."""
            return self.transport.get_protocol() is not self

        def _awaiting_request(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm_header_timer(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(
                    header_timeout, self._drop_if_still_waiting
                )

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _drop_if_still_waiting(self) -> None:
            self._header_timer = None
            if self._awaiting_request() and not self.transport.is_closing():
                self.transport.close()

    return GuardedH11Protocol
