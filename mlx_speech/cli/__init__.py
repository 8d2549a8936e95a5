"""``mlx-speech``, the command line: a module for each subcommand
(``speak``, ``serve``, ``voices``, ``normalize``), the flags they share
(``arguments``), and the sound card (``playback``)."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
