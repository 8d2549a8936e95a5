"""The ``mlx-speech`` command: its subcommands, each a module of this package,
and one line for any error."""

from __future__ import annotations

import argparse
import sys

from ..errors import ModelNotFetched
from . import book, normalize, serve, speak, voices
from .arguments import Parser


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mlx-speech", description="Local text-to-speech on MLX.")
    parser.add_argument("--version", action="version", version=f"mlx-speech {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve.add_parser(commands)
    speak.add_parser(commands)
    book.add_parser(commands)
    voices.add_parser(commands)
    normalize.add_parser(commands)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlx-speech-server")
    except PackageNotFoundError:  # run from a source tree, not installed
        return "(not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # --help and usage errors end here, at once
    if args.command == "serve" and not args.http and args.wyoming_port is None:
        parser.error("--no-http serves Wyoming alone: it needs --wyoming-port")
    if args.command == "serve" and args.public_listings and not args.api_key:
        parser.error("--public-listings opens what --api-key guards: it needs a key")
    try:
        commands = {
            "serve": serve.run,
            "speak": speak.run,
            "book": book.run,
            "voices": voices.run,
            "normalize": normalize.run,
        }
        commands[args.command](args)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # noqa: BLE001 - one line, never a traceback
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        if isinstance(error, ModelNotFetched):
            message = error.saying("pass --model DIR, a directory")
        print(f"mlx-speech: error: {message}", file=sys.stderr)
        return 1
    return 0
