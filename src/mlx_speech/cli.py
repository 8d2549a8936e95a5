"""``mlx-speech``: the command line."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def _speak_parser(commands) -> None:
    speak = commands.add_parser(
        "speak",
        help="synthesize TEXT into an audio file",
        description="Synthesize TEXT into an audio file and report time to first "
        "audio, audio length and real-time factor.",
    )
    speak.add_argument(
        "text", metavar="TEXT", help="text to speak; '-' reads standard input"
    )
    speak.add_argument(
        "--model",
        default=None,
        help="checkpoint directory or hub id (default: mlx-community/MOSS-TTS-Nano-100M)",
    )
    voice = speak.add_mutually_exclusive_group()
    voice.add_argument("--voice", default=None, help="'default' or a reference audio file")
    voice.add_argument(
        "--ref-audio", default=None, metavar="FILE", help="reference clip to clone"
    )
    speak.add_argument(
        "-o", "--output", default="speech.wav", help="output file (default: speech.wav)"
    )
    speak.add_argument(
        "--format",
        default=None,
        choices=["wav", "flac", "mp3", "ogg", "opus", "pcm"],
        help="container (default: from the output suffix)",
    )
    speak.add_argument("--seed", type=int, default=None, help="make sampling reproducible")
    speak.add_argument("--temperature", type=float, default=None, help="0 is greedy")
    speak.add_argument(
        "--max-new-tokens", type=int, default=None, help="audio frames per text segment"
    )


def _speak(args: argparse.Namespace) -> None:
    import mlx_speech

    text = sys.stdin.read() if args.text == "-" else args.text
    tts = mlx_speech.load(args.model or mlx_speech.DEFAULT_MODEL)
    started = time.perf_counter()
    first_audio = None
    chunks = []
    for chunk in tts.stream(
        text,
        voice=args.ref_audio or args.voice,
        seed=args.seed,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
    ):
        if first_audio is None:
            first_audio = time.perf_counter() - started
        chunks.append(chunk.samples)
    elapsed = time.perf_counter() - started
    samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    audio = mlx_speech.Audio(samples, tts.sample_rate)
    path = audio.write(Path(args.output), format=args.format)
    rtf = elapsed / audio.duration if audio.duration else float("inf")
    print(
        f"wrote {path}: {audio.duration:.2f} s of audio; first audio after "
        f"{(first_audio or elapsed) * 1000:.0f} ms; real-time factor {rtf:.2f} "
        "(generation time / audio time)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mlx-speech", description="Local text-to-speech on MLX."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _speak_parser(commands)
    args = parser.parse_args(argv)
    try:
        _speak(args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # noqa: BLE001 - one line, never a traceback
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"mlx-speech: error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
