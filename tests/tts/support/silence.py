"""Finding silence in what the surfaces send, and getting it from the
WebSocket and Wyoming, for the pause and SSML tests."""

from __future__ import annotations

import asyncio
import json

import numpy as np
from websockets.sync.client import connect
from wyoming.client import AsyncTcpClient
from wyoming.event import Event


def longest_zero_run(pcm: bytes) -> int:
    """The longest run of zero samples in 16-bit PCM."""
    zero = np.frombuffer(pcm, dtype="<i2") == 0
    edges = np.flatnonzero(np.diff(np.concatenate([[0], zero.astype(int), [0]])))
    return int(max(edges[1::2] - edges[::2], default=0))


def socket_pcm(server, config: dict, pieces: list[str]) -> bytes:
    """One utterance's PCM over the WebSocket (``config`` asks for pcm)."""
    url = server.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(url) as ws:
        ws.send(json.dumps({"type": "session.config", **config}))
        for piece in pieces:
            ws.send(json.dumps({"type": "input.text", "text": piece}))
        ws.send(json.dumps({"type": "input.done"}))
        pcm = b""
        while True:
            frame = ws.recv(timeout=60)
            if isinstance(frame, bytes):
                pcm += frame
            elif json.loads(frame)["type"] == "session.done":
                return pcm


def wyoming_pcm(port: int, synthesize: Event) -> bytes:
    """A ``synthesize`` event's audio from the Wyoming server on ``port``."""

    async def run() -> bytes:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(synthesize)
            audio = b""
            while (answer := await client.read_event()).type != "audio-stop":
                assert answer.type != "error", answer.data
                audio += answer.payload or b""
            return audio

    return asyncio.run(run())
