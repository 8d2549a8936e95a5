"""The serve flags: their defaults are ``ServerSettings``' and each reaches it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_speech import DEFAULT_MODEL
from mlx_speech.cli import build_parser, main
from mlx_speech.cli.serve import server_settings
from mlx_speech.settings import ServerSettings

pytestmark = pytest.mark.slow  # the command in subprocesses


def _settings(*flags: str) -> ServerSettings:
    return server_settings(build_parser().parse_args(["serve", *flags]))


def test_serve_without_flags_runs_with_the_default_settings():
    assert _settings() == ServerSettings(model=DEFAULT_MODEL)


@pytest.mark.parametrize(
    "flags, field, value",
    [
        (["--default-format", "wav"], "default_format", "wav"),
        (["--max-parked", "3"], "max_parked", 3),
        (["--max-batch", "2"], "max_batch", 2),
        (["--voice-alias", "alloy=grandma"], "voice_aliases", (("alloy", "grandma"),)),
        (["--cors-origin", "*"], "cors_origins", ("*",)),
        (["--quantize", "4"], "quantize", 4),
        (["--api-key", "k", "--public-listings"], "public_listings", True),
        (["--books-dir", "/srv/books"], "books_dir", Path("/srv/books")),
        (["--max-books", "3"], "max_books", 3),
    ],
)
def test_each_flag_sets_its_field(flags, field, value):
    assert getattr(_settings(*flags), field) == value


def test_an_unknown_default_format_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        _settings("--default-format", "wma")
    assert exited.value.code == 2
    assert "--default-format" in capsys.readouterr().err


def test_public_listings_without_a_key_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("MLX_SPEECH_API_KEY", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--public-listings"])
    assert exited.value.code == 2
    assert "--public-listings" in capsys.readouterr().err
