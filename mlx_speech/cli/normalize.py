"""``mlx-speech normalize``: TEXT as the model is given it."""

from __future__ import annotations

import argparse
import sys

from ..text.lexicon import load_lexicon
from .arguments import (
    lexicon_argument,
)


def add_parser(commands) -> None:
    normalize = commands.add_parser(
        "normalize",
        help="print TEXT as the model is given it",
        description="Print TEXT after text normalization, as the model is given it "
        "(numbers, money, dates, units and symbols read out; URLs, e-mail addresses, "
        "file names and versions kept).",
    )
    normalize.add_argument("text", metavar="TEXT", help="text; '-' reads standard input")
    normalize.add_argument(
        "--language",
        default="auto",
        help="en, zh (or any name or code; others get the cleanup only) or auto, "
        "chosen by script (default: auto)",
    )
    lexicon_argument(normalize)


def run(args: argparse.Namespace) -> None:
    from ..families.fields import check_text
    from ..text.normalization import TextNormalizer

    lexicon = load_lexicon(args.lexicon) if args.lexicon else None
    text = _read_text(sys.stdin.buffer) if args.text == "-" else args.text
    check_text(text)
    if lexicon is not None:
        text = lexicon.apply(text)
    print(TextNormalizer().normalize(text, args.language))


def _read_text(stream) -> str:
    try:
        return stream.read().decode("utf-8")
    except UnicodeDecodeError as error:
        raise RuntimeError(f"standard input is not UTF-8 text: {error}") from None
