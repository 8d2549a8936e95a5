"""Finding silence in what the surfaces send, and getting it from
Wyoming, for the pause and SSML tests."""

from __future__ import annotations

import asyncio

import numpy as np
from wyoming.client import AsyncTcpClient
from wyoming.event import Event


def longest_zero_run(pcm: bytes) -> int:
    """The longest run of zero samples in 16-bit PCM."""
    zero = np.frombuffer(pcm, dtype="<i2") == 0
    edges = np.flatnonzero(np.diff(np.concatenate([[0], zero.astype(int), [0]])))
    return int(max(edges[1::2] - edges[::2], default=0))


def wyoming_pcm(port: int, *sent: Event, until: str = "audio-stop") -> bytes:
    """The audio the Wyoming server on ``port`` answers ``sent`` with (a
    ``synthesize``; a stream's events, ``until`` its ``synthesize-stopped``)."""

    async def run() -> bytes:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            for event in sent:
                await client.write_event(event)
            audio = b""
            while (answer := await client.read_event()).type != until:
                assert answer.type != "error", answer.data
                audio += answer.payload or b""
            return audio

    return asyncio.run(asyncio.wait_for(run(), 60))


def assert_joined(said: np.ndarray, pieces: list, edge: int) -> None:
    """``said`` is ``pieces`` joined: each array (a part spoken alone) equal
    but for its ``edge`` samples where it meets another piece, which fade
    to near silence there (no click); each int a run of exact zeros."""
    at = 0
    for number, piece in enumerate(pieces):
        if isinstance(piece, int):
            assert not said[at : at + piece].any(), f"piece {number} is not silence"
            at += piece
            continue
        got = said[at : at + len(piece)]
        assert len(got) == len(piece), f"piece {number} is cut short"
        start = edge if number > 0 else 0
        end = len(piece) - (edge if number < len(pieces) - 1 else 0)
        np.testing.assert_array_equal(got[start:end], piece[start:end])
        if number > 0:
            assert abs(float(got[0])) <= 1e-3 * max(1.0, float(np.abs(piece).max()))
        if number < len(pieces) - 1:
            assert abs(float(got[-1])) <= 1e-3 * max(1.0, float(np.abs(piece).max()))
        at += len(piece)
    assert at == len(said)
