"""``ServerSettings``: every setting of ``mlx-speech serve`` with its default,
in one place; the CLI's flags and their help text read them from here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .engine.limits import DEFAULT_MAX_BATCH, DEFAULT_MAX_PARKED
from .text.lexicon import Lexicon

_ONE_MIB = 1024 * 1024


@dataclass(frozen=True)
class ServerSettings:
    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    public_listings: bool = False  # the key-guarded listings answer without it
    allowed_hosts: tuple[str, ...] = ()  # Host names besides IP addresses and localhost
    cors_origins: tuple[str, ...] = ()  # pages allowed to call the API ("*": any)
    max_queue: int = 16  # requests waiting for the model; more get 429
    max_batch: int = DEFAULT_MAX_BATCH  # requests stepped together per forward
    max_parked: int = DEFAULT_MAX_PARKED  # streams kept while their readers lag
    default_format: str = "mp3"  # response_format when a request names none
    max_input_chars: int = 4096
    max_ref_bytes: int = 20 * _ONE_MIB
    stream_idle_timeout: float = 30.0
    socket_idle_timeout: float = 30.0  # a WebSocket session with nothing to say
    max_connections: int = 256  # open at once; more are closed unread
    header_timeout: float = 10.0  # seconds to send a request's headers
    body_timeout: float = 30.0  # seconds, from the headers, to send the whole body
    keep_alive_timeout: float = 5.0  # an idle connection between requests
    shutdown_timeout: float = 30.0  # running requests may finish, then are ended
    retry_after_seconds: int = 2
    voices_dir: Path | None = None  # None: the per-user default
    books_dir: Path | None = None  # None: the per-user default, beside the voices'
    max_books: int = 16  # book jobs kept at once, finished ones included
    voice_aliases: tuple[tuple[str, str], ...] = ()  # (name clients send, voice)
    allowed_local_media_path: Path | None = None  # None: file:// refused
    normalize: bool = True  # a request's text normalization when it does not say
    quantize: int | None = None  # bits of MOSS-TTS-Nano's transformer weights
    backend: str | None = None  # "auto", "mlx" or "host"; None: MLX_SPEECH_BACKEND
    wyoming_port: int | None = None  # None: no Wyoming server
    wyoming_host: str | None = None  # None: host's
    http: bool = True  # False: the Wyoming server alone
    lexicon: Lexicon | None = None  # words said otherwise, before normalization

    @property
    def max_body_bytes(self) -> int:
        """A JSON body may carry the largest clip base64-encoded, plus 1 MiB."""
        return self.max_ref_bytes * 4 // 3 + _ONE_MIB
