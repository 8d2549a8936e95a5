"""``mlx-speech speak``: TEXT (or standard input as it arrives) into an audio
file or the sound card, with what each time measured."""

from __future__ import annotations

import argparse
import codecs
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..audio.formats import FORMATS, format_for_path
from ..backends import FIRST_COMPILE_NOTICE, blas_name, mlx_compiled_here_before
from ..text.segments import SPLITS
from .arguments import loaded_model, sampling_arguments, speech_arguments, speech_request
from .places import check_writable


def add_parser(commands) -> None:
    speak = commands.add_parser(
        "speak",
        help="synthesize TEXT into an audio file",
        description="Synthesize TEXT into an audio file and report time to first "
        "audio, audio length and real-time factor.",
    )
    speak.add_argument(
        "text",
        metavar="TEXT",
        help="text to speak; '-' reads standard input as it arrives, speaking each "
        "sentence once it is complete",
    )
    speech_arguments(speak)
    speak.add_argument(
        "-o",
        "--output",
        default=None,
        help="output file (default: speech.wav, or none with --play)",
    )
    speak.add_argument(
        "--play", action="store_true", help="play through the sound card as it is generated"
    )
    speak.add_argument(
        "--split",
        default="sentence",
        choices=SPLITS,
        help="with '-': speak each sentence, clause, or (none) the whole input at its end "
        "(default: sentence)",
    )
    speak.add_argument(
        "--format",
        default=None,
        choices=list(FORMATS),
        help="container (default: from the output suffix)",
    )
    speak.add_argument(
        "--captions",
        default=None,
        metavar="FILE",
        help="also write each sentence's (or clause's, with --split) time in the "
        "audio to FILE, WebVTT (.vtt) or SubRip (.srt); the text is then spoken "
        "segment by segment, as with '-'",
    )
    sampling_arguments(speak)


def run(args: argparse.Namespace) -> None:
    import mlx_speech

    output = _checked_output(args)
    _checked_captions(args)
    if sys.stderr.isatty() and not mlx_compiled_here_before():
        print(f"note: {FIRST_COMPILE_NOTICE}", file=sys.stderr, flush=True)
    loading = time.perf_counter()
    tts = loaded_model(args)
    started = time.perf_counter()
    stream = _speech_stream(tts, args)
    chunks, first_audio = _generated(stream, args, tts.sample_rate, started)
    elapsed = time.perf_counter() - started
    samples = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    audio = mlx_speech.Audio(samples, tts.sample_rate)
    where = "played" if output is None else _written(audio, output, args.format)
    print(_summary(where, audio.duration, started - loading, first_audio, elapsed))
    if args.captions is not None:
        _write_captions(args.captions, stream.captions)
        print(f"wrote {args.captions}: {len(stream.captions)} captions")
    blas = f", BLAS: {blas_name()}" if tts.device == "cpu" else ""
    print(f"backend: {tts.backend} ({tts.backend_reason}) on {tts.device}{blas}")
    if getattr(stream, "ignored", ()):
        print(f"ignored (this model does not use them): {', '.join(stream.ignored)}")


class _StandardInput:
    """Standard input as it arrives (a pipe from a chat model), as text;
    ``any_text`` says whether any of it was more than whitespace."""

    def __init__(self, read=None):
        self._read = read or (lambda: os.read(sys.stdin.fileno(), 4096))
        self.any_text = False

    def __iter__(self):
        decoder = codecs.getincrementaldecoder("utf-8")()
        consumed = 0
        while True:
            data = self._read()
            try:
                text = decoder.decode(data, final=not data)
            except UnicodeDecodeError as error:
                raise RuntimeError(
                    f"standard input is not UTF-8 text (byte {consumed + error.start})"
                ) from None
            consumed += len(data)
            if text:
                self.any_text = self.any_text or bool(text.strip())
                yield text
            if not data:
                return


def _speech_stream(tts, args: argparse.Namespace):
    """The chunks ``speak`` writes: of TEXT, or of standard input as it arrives."""
    request = speech_request(args, "" if args.text == "-" else args.text)
    if args.text == "-":
        args.stdin = _StandardInput()
        return tts.open_text(args.stdin, request, split=args.split)
    if args.captions is not None:
        return tts.open_text([args.text], request, split=args.split)
    return tts.open(request)


def _chunks_saying_segments(stream, say: bool):
    """A text stream's chunks, telling standard error what each segment says
    (``say``)."""
    from ..audio.samples import Audio
    from ..text.stream import SegmentStarted, TextStream

    if not isinstance(stream, TextStream):
        yield from stream
        return
    for event in stream.events():
        if isinstance(event, SegmentStarted) and say:
            print(f"speaking: {event.text}", file=sys.stderr, flush=True)
        elif isinstance(event, Audio):
            yield event


def _generated(stream, args: argparse.Namespace, sample_rate: int, started: float):
    """The stream's chunks (played as they come with --play), and the
    seconds from ``started`` to the first."""
    from .playback import Player

    player = Player(sample_rate, args.channels or 1) if args.play else None
    first_audio, chunks = None, []
    try:
        for chunk in _chunks_saying_segments(stream, say=args.text == "-"):
            if first_audio is None:
                first_audio = time.perf_counter() - started
            chunks.append(chunk.samples)
            if player is not None:
                player.write(chunk.samples)
    except ValueError:
        if args.text == "-" and not args.stdin.any_text:
            raise RuntimeError(
                "standard input was empty: nothing to speak (pipe text in, or give "
                "the text as the argument instead of -)"
            ) from None
        raise
    finally:
        stream.close()
        if player is not None:
            player.close()
    return chunks, first_audio


def _write_captions(path: str, captions: list) -> None:
    from ..text.captions import srt, webvtt

    write = webvtt if Path(path).suffix.lower() == ".vtt" else srt
    Path(path).write_text(write(captions), encoding="utf-8")


def _checked_captions(args: argparse.Namespace) -> None:
    """A captions file must be .vtt or .srt, in a directory that exists."""
    if args.captions is None:
        return
    path = Path(args.captions)
    if path.suffix.lower() not in (".vtt", ".srt"):
        raise RuntimeError(f"cannot write captions to {path}: name a .vtt or .srt file")
    if not path.absolute().parent.is_dir():
        raise RuntimeError(f"cannot write {path}: its directory does not exist")
    check_writable(path.absolute().parent)


def _checked_output(args: argparse.Namespace) -> str | None:
    """The file to write (None: only played), checked before any work."""
    output = args.output or (None if args.play else "speech.wav")
    if output is None:
        return None
    if Path(output).is_dir():
        raise RuntimeError(
            f"cannot write {output}: it is a directory; name a file in it, "
            f"e.g. -o {Path(output) / 'speech.wav'}"
        )
    format_for_path(output, args.format)  # a bad name fails before any work
    if not Path(output).absolute().parent.is_dir():
        raise RuntimeError(f"cannot write {output}: its directory does not exist")
    check_writable(Path(output).absolute().parent)
    return output


def _written(audio, output: str, format_name: str | None) -> str:
    try:
        written = audio.write(Path(output), format=format_name)
    except OSError as error:  # a full disk, a device that refuses writes
        raise RuntimeError(f"cannot write {output}: {error.strerror or error}") from None
    kind = format_for_path(written, format_name).name
    layout = "mono" if audio.channels == 1 else f"{audio.channels} channels"
    return f"wrote {written} ({kind}, {audio.sample_rate} Hz, {layout})"


def _summary(
    where: str, seconds: float, load: float, first_audio: float | None, total: float
) -> str:
    """What ``speak`` made, and what each time measures."""
    rtf = f"{total / seconds:.2f}" if seconds else "none (no audio)"
    first = (
        "no audio" if first_audio is None else f"first audio {first_audio * 1000:.0f} ms"
    )
    return (
        f"{where}: {seconds:.2f} s of audio; model loaded in {load:.1f} s; then "
        f"{first} and all of it in {total:.2f} s (real-time factor {rtf}: "
        "generation time / audio time)"
    )
