"""The flags more than one subcommand takes, and the parser's one-line usage
errors."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from .. import DEFAULT_MODEL
from ..backends import BACKEND_VARIABLE, BACKENDS
from ..families import QUANTIZE_BITS
from ..request import SpeechRequest
from ..settings import ServerSettings

LOG_LEVELS = ("debug", "info", "warning", "error")
VOICES_DIR_HELP = (
    "directory of saved voices (default: ~/.local/share/mlx-speech/voices, or "
    "~/Library/Application Support/mlx-speech/voices on macOS)"
)


class Parser(argparse.ArgumentParser):
    """Usage errors in one line, like every other error of the command."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def setting(name: str):
    """The server's default for a setting (``ServerSettings``, the one source)."""
    return next(f.default for f in dataclasses.fields(ServerSettings) if f.name == name)


def model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help=f"checkpoint directory or hub id (default: {DEFAULT_MODEL})",
    )


def quantize_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quantize",
        type=int,
        default=None,
        choices=QUANTIZE_BITS,
        help="quantize MOSS-TTS-Nano's transformer weights to this many bits as they "
        "load (less memory; on a CPU, speech is slower, not faster; the codec "
        "stays float; default: as stored)",
    )


def backend_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        default=None,
        choices=BACKENDS,
        help="what runs the model: mlx (MLX alone, as on a Mac), host (MOSS-TTS-Nano's "
        "host engine on Linux's CPU, the rest through MLX) or auto (host where it "
        f"can run, else mlx; default: ${BACKEND_VARIABLE}, else auto)",
    )


def lexicon_argument(parser) -> None:
    parser.add_argument(
        "--lexicon",
        default=None,
        metavar="FILE",
        help="say words otherwise before normalization: a W3C PLS file, or lines "
        "'WRITTEN = SAID' (e.g. 'SQL = sequel')",
    )


def no_normalize_argument(parser, gives: str) -> None:
    parser.add_argument(
        "--no-normalize",
        dest="normalize",
        action="store_false",
        help=f"{gives}; without it, numbers, symbols and "
        "dates are read out first (see 'mlx-speech normalize')",
    )


# The sampling keywords (``SamplingOptions``), each a flag of ``speak``.
SAMPLING_FLAGS = [
    ("seed", int, "make sampling reproducible"),
    ("temperature", float, "0 is greedy (default: the model's)"),
    ("top_p", float, "nucleus filtering of audio tokens (default: the model's)"),
    ("top_k", int, "top-k filtering of audio tokens (default: the model's)"),
    ("repetition_penalty", float, "(default: the model's)"),
    ("max_new_tokens", int, "audio frames per text segment (default: the model's)"),
]


def speech_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and how it speaks: the flags ``speak`` and ``book`` share."""
    model_argument(parser)
    quantize_argument(parser)
    backend_argument(parser)
    voice = parser.add_mutually_exclusive_group()
    voice.add_argument(
        "--voice",
        default=None,
        help="'default', a preset or saved voice name, or a reference audio file",
    )
    voice.add_argument(
        "--ref-audio", default=None, metavar="FILE", help="reference clip to clone"
    )
    parser.add_argument(
        "--ref-text",
        default=None,
        help="transcript of the reference clip, for models that use it",
    )
    parser.add_argument(
        "--instructions", default=None, help="voice description or speaking style"
    )
    parser.add_argument("--language", default=None, help="language (default: auto)")
    parser.add_argument(
        "--speed",
        type=float,
        default=None,
        help="pace, 0.25 to 4.0; pitch is kept (default: 1.0)",
    )
    parser.add_argument(
        "--channels",
        type=int,
        default=None,
        choices=[1, 2],
        help="2: a stereo model's own channels (MOSS-TTS-Nano) instead of a mono mix "
        "(default: 1)",
    )
    no_normalize_argument(parser, "give the model the text as written")
    lexicon_argument(parser)


def sampling_arguments(parser: argparse.ArgumentParser) -> None:
    """The sampling flags, and where saved voices are."""
    for name, kind, text in SAMPLING_FLAGS:
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=kind, default=None, help=text)
    parser.add_argument("--voices-dir", default=None, help=VOICES_DIR_HELP)


def speech_request(args: argparse.Namespace, text: str) -> SpeechRequest:
    """What the flags of ``speech_arguments`` and ``sampling_arguments`` ask."""
    return SpeechRequest(
        text,
        Path(args.ref_audio) if args.ref_audio else args.voice,
        ref_text=args.ref_text,
        instructions=args.instructions,
        language=args.language,
        speed=args.speed,
        normalize=args.normalize,
        channels=args.channels,
        sampling={name: getattr(args, name) for name, _, _ in SAMPLING_FLAGS},
    )


def loaded_model(args: argparse.Namespace):
    """The model the flags of ``speech_arguments`` name, loaded."""
    import mlx_speech

    return mlx_speech.load(
        args.model or DEFAULT_MODEL,
        voices_dir=args.voices_dir,
        quantize=args.quantize,
        backend=args.backend,
        lexicon=args.lexicon,
    )
