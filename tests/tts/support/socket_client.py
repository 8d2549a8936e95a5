"""One utterance over the speech WebSocket, as a client sends it."""

from __future__ import annotations

import json

from websockets.sync.client import connect


def socket_pcm(server, config: dict, pieces: list[str], timeout: float = 60) -> bytes:
    """The PCM of ``pieces`` sent as one utterance (``config`` asks for pcm);
    an ``error`` message fails the test."""
    url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url) as ws:
        ws.send(json.dumps({"type": "session.config", **config}))
        for piece in pieces:
            ws.send(json.dumps({"type": "input.text", "text": piece}))
        ws.send(json.dumps({"type": "input.done"}))
        pcm = b""
        while True:
            frame = ws.recv(timeout=timeout)
            if isinstance(frame, bytes):
                pcm += frame
                continue
            message = json.loads(frame)
            assert message["type"] != "error", message
            if message["type"] == "session.done":
                return pcm
