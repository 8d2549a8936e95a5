"""Home Assistant's Wyoming TTS client, as it reads (2026.2): a
``synthesize`` is read until ``audio-stop``, a stream until
``synthesize-stopped``; ``error`` events are skipped, so a refused request
must still end that way, at once (it waited for the idle timeout)."""

from __future__ import annotations

import asyncio
import time

import pytest
from wyoming.audio import AudioChunk, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from mlx_speech.server import ServerSettings
from tests.tts.support.server import RunningServer

pytestmark = pytest.mark.slow  # a real server

PROMPT_END = 2.0  # seconds Home Assistant may wait for a refused request's end
PIECE_SECONDS = 0.1  # between the pieces of a streamed text


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("ha-voices"),
        max_input_chars=100,
        socket_idle_timeout=30,
        wyoming_port=0,
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


async def home_assistant_synthesize(port: int, text: str, voice: str | None) -> bytes:
    """Its one-shot path: the PCM of the chunks until audio-stop, all other
    events skipped."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        asked = SynthesizeVoice(name=voice) if voice else None
        await client.write_event(Synthesize(text=text, voice=asked).event())
        pcm = b""
        while (event := await client.read_event()) is not None:
            if AudioStop.is_type(event.type):
                break
            if AudioChunk.is_type(event.type):
                pcm += AudioChunk.from_event(event).audio
        return pcm


async def home_assistant_stream(port: int, pieces: list[str], voice: str | None) -> bytes:
    """Its streaming path: the text written piece by piece (and whole, for
    servers that do not stream) while the audio is read until
    synthesize-stopped; then it hangs up, its writer done or not (a writer
    cut off so raised an AssertionError in Home Assistant's log)."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        asked = SynthesizeVoice(name=voice) if voice else None

        async def write() -> None:
            await client.write_event(SynthesizeStart(voice=asked).event())
            for piece in pieces:
                await asyncio.sleep(PIECE_SECONDS)  # as a chat model writes them
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(Synthesize(text="".join(pieces), voice=asked).event())
            await client.write_event(SynthesizeStop().event())

        writing = asyncio.create_task(write())
        pcm = b""
        while (event := await client.read_event()) is not None:
            if AudioChunk.is_type(event.type):
                pcm += AudioChunk.from_event(event).audio
            elif SynthesizeStopped.is_type(event.type):
                break
        await asyncio.sleep(0)  # what the writer had left to do at once
        assert writing.done(), "answered before the client's synthesize-stop was sent"
        await writing
        return pcm


def timed(server, conversation, *args) -> tuple[bytes, float]:
    port = server.app.state.wyoming_port
    started = time.monotonic()
    pcm = asyncio.run(asyncio.wait_for(conversation(port, *args), 60))
    return pcm, time.monotonic() - started


@pytest.mark.parametrize(
    "text, voice",
    [("Hello there.", "deleted-voice"), ("x" * 101, None)],
    ids=["unknown-voice", "too-long"],
)
def test_a_refused_synthesize_ends_home_assistants_read_at_once(server, text, voice):
    pcm, seconds = timed(server, home_assistant_synthesize, text, voice)
    assert pcm == b"" and seconds < PROMPT_END


def test_a_refused_stream_ends_home_assistants_read_at_once(server):
    pieces = ["Hello ", "there."]
    pcm, seconds = timed(server, home_assistant_stream, pieces, "deleted-voice")
    assert pcm == b"" and seconds < PROMPT_END


def test_home_assistants_reads_still_get_the_audio(server):
    spoken, _ = timed(server, home_assistant_synthesize, "Hello there.", None)
    streamed, _ = timed(server, home_assistant_stream, ["Hello ", "there."], None)
    assert len(spoken) > 0 and len(streamed) > 0
