"""Send text to a running `mlx-speech serve` as it is written; save the audio.

    pip install websockets
    python examples/speak_over_websocket.py "Hello there. How are you today?" -o hello.wav

The text is sent a word at a time (as a chat model writes it); each sentence
comes back as soon as it is complete, as 24 kHz PCM chunks, which this
script joins into one WAV file. The protocol is vLLM-Omni's, described in
docs/speech/text-streams.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import wave

import websockets


async def send_words(socket, text: str, delay: float) -> None:
    words = text.split(" ")
    for index, word in enumerate(words):
        piece = word if index == len(words) - 1 else word + " "
        await socket.send(json.dumps({"type": "input.text", "text": piece}))
        await asyncio.sleep(delay)
    await socket.send(json.dumps({"type": "input.done"}))


async def speak(args: argparse.Namespace) -> None:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    config = {
        "type": "session.config",
        "voice": args.voice,
        "response_format": "pcm",
        "stream_audio": True,
        "split_granularity": "sentence",
    }
    started = time.perf_counter()
    first_audio = None
    pcm = bytearray()
    rate = 24000
    async with websockets.connect(args.url, additional_headers=headers) as socket:
        await socket.send(json.dumps(config))
        sender = asyncio.create_task(send_words(socket, args.text, args.delay))
        async for frame in socket:
            if isinstance(frame, bytes):
                first_audio = first_audio or time.perf_counter() - started
                pcm += frame
                continue
            message = json.loads(frame)
            if message["type"] == "audio.start":
                rate = message["sample_rate"]
                print(f"speaking: {message['sentence_text']}")
            elif message["type"] == "error":
                print(f"error: {message['message']}")
            elif message["type"] == "session.done":
                break
        await sender
        await socket.send(json.dumps({"type": "session.close"}))
    with wave.open(args.output, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(bytes(pcm))
    seconds = len(pcm) / 2 / rate
    waited = (first_audio or 0) * 1000
    print(f"wrote {args.output}: {seconds:.2f} s; first audio after {waited:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text")
    parser.add_argument("-o", "--output", default="speech.wav")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/audio/speech/stream")
    parser.add_argument("--voice", default="default")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds between words")
    args = parser.parse_args()
    asyncio.run(speak(args))


if __name__ == "__main__":
    main()
