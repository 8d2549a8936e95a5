"""``mlx-speech serve``: its flags, the settings they make, and the server's
life until a signal stops it."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from .. import DEFAULT_MODEL
from ..audio.formats import RESPONSE_FORMATS
from ..backends import FIRST_COMPILE_NOTICE, blas_name, mlx_compiled_here_before
from ..settings import ServerSettings
from ..text.lexicon import load_lexicon
from ..voices.resolve import parse_aliases
from .arguments import (
    LOG_LEVELS,
    VOICES_DIR_HELP,
    backend_argument,
    lexicon_argument,
    model_argument,
    no_normalize_argument,
    positive_int,
    quantize_argument,
    setting,
)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_parser(commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the OpenAI-compatible speech server",
        description="Serve /v1/audio/speech (OpenAI and vLLM-Omni compatible) "
        "with its WebSocket, /v1/audio/voices, book jobs (/v1/audio/books), the "
        "page at /, /v1/models, /health and /metrics; with --wyoming-port, Home "
        "Assistant's Wyoming protocol beside them.",
    )
    model_argument(serve)
    quantize_argument(serve)
    backend_argument(serve)
    host, port = setting("host"), setting("port")
    serve.add_argument(
        "--host", default=host, help=f"address to listen on (default: {host})"
    )
    serve.add_argument("--port", type=int, default=port, help=f"port (default: {port})")
    _wyoming_arguments(serve)
    _access_arguments(serve)
    default_format = setting("default_format")
    serve.add_argument(
        "--default-format",
        default=default_format,
        choices=RESPONSE_FORMATS,
        help="response_format of requests that name none "
        f"(default: {default_format}, as OpenAI's)",
    )
    _limit_arguments(serve)
    serve.add_argument(
        "--log-level",
        default="info",
        choices=LOG_LEVELS,
        help="info (the default): loading, listening, the model's backend and "
        "warnings; debug adds uvicorn's own lines and one line per request",
    )
    _storage_arguments(serve)


def _access_arguments(serve) -> None:
    """Who may call: the Host names and origins answered, and the key."""
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests whose Host header is NAME (repeatable; IP "
        "addresses and localhost always are): other names are refused, against "
        "DNS rebinding",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let web pages from ORIGIN (e.g. http://localhost:3000, or '*') call "
        "the API (repeatable; default: only this server's own pages)",
    )
    serve.add_argument(
        "--api-key",
        default=os.environ.get("MLX_SPEECH_API_KEY"),
        help="require this key as 'Authorization: Bearer KEY' or 'x-api-key' "
        "(default: $MLX_SPEECH_API_KEY; unset means no auth)",
    )
    serve.add_argument(
        "--public-listings",
        action="store_true",
        help="with --api-key: let GET /v1/models, /v1/audio/models and "
        "/v1/audio/voices answer without the key, as Open WebUI lists voices "
        "without sending it; anyone who reaches the port then sees the saved "
        "voices' names and transcripts (speech and voice changes still need the key)",
    )


def _storage_arguments(serve) -> None:
    """Where voices, books and reference clips are kept; what words mean."""
    serve.add_argument("--voices-dir", default=None, help=VOICES_DIR_HELP)
    serve.add_argument(
        "--books-dir",
        default=None,
        metavar="DIR",
        help="directory of the book jobs (POST /v1/audio/books), kept across "
        "restarts (default: ~/.local/share/mlx-speech/books, or "
        "~/Library/Application Support/mlx-speech/books on macOS)",
    )
    no_normalize_argument(
        serve,
        "give the model each request's text as written, unless the request "
        "sends normalize: true",
    )
    lexicon_argument(serve)
    serve.add_argument(
        "--voice-alias",
        action="append",
        default=[],
        metavar="NAME=VOICE",
        help="speak voice NAME (e.g. OpenAI's 'alloy') as VOICE, a saved or preset "
        "voice (repeatable; OpenAI's names are otherwise the model's own voice)",
    )
    serve.add_argument(
        "--allowed-local-media-path",
        default=None,
        metavar="DIR",
        help="allow ref_audio to name files under DIR, as file:// URIs or absolute "
        "paths (default: refused)",
    )


def _wyoming_arguments(serve) -> None:
    serve.add_argument(
        "--wyoming-port",
        type=int,
        default=None,
        metavar="PORT",
        help="also speak the Wyoming protocol (Home Assistant's) on this TCP port "
        "(its usual one is 10200; default: off)",
    )
    serve.add_argument(
        "--wyoming-host",
        default=None,
        metavar="HOST",
        help="address the Wyoming server listens on (default: --host's); it has "
        "no keys, so keep it on addresses only trusted machines reach",
    )
    serve.add_argument(
        "--no-http",
        dest="http",
        action="store_false",
        help="run the Wyoming server alone, without HTTP (needs --wyoming-port)",
    )


def _limit_arguments(serve) -> None:
    """Flags named after ``ServerSettings`` fields, with their defaults."""
    limits = [
        ("max_queue", int, "requests allowed to wait for the model; more get 429"),
        (
            "max_batch",
            positive_int,
            "requests stepped together in one forward pass; 1 turns batching off",
        ),
        (
            "max_parked",
            int,
            "streams kept while their clients do not read; more wait to start",
        ),
        ("max_input_chars", int, "longest accepted input text, in characters"),
        (
            "max_books",
            positive_int,
            "book jobs kept at once, finished ones included; more are refused (429) "
            "until some are deleted",
        ),
        ("max_ref_bytes", int, "largest reference clip, in bytes"),
        (
            "stream_idle_timeout",
            float,
            "cancel a stream whose client reads nothing for this many seconds",
        ),
        (
            "socket_idle_timeout",
            float,
            "close a WebSocket session that sends nothing for this many seconds",
        ),
        ("max_connections", int, "connections open at once; more are closed unread"),
        ("header_timeout", float, "seconds a client may take to send its headers"),
        (
            "body_timeout",
            float,
            "seconds a client may take to send a request's whole body, from its "
            "headers (408 and the connection closed after that)",
        ),
        ("keep_alive_timeout", float, "seconds an idle connection is kept open"),
        (
            "shutdown_timeout",
            float,
            "on SIGTERM or SIGINT, seconds running requests may take to finish",
        ),
    ]
    for name, kind, text in limits:
        default = setting(name)
        serve.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            default=default,
            help=f"{text} (default: {default})",
        )


def server_settings(args: argparse.Namespace) -> ServerSettings:
    return ServerSettings(
        model=args.model or DEFAULT_MODEL,
        host=args.host,
        port=args.port,
        api_key=args.api_key or None,
        public_listings=args.public_listings,
        allowed_hosts=tuple(args.allowed_host),
        cors_origins=tuple(args.cors_origin),
        default_format=args.default_format,
        max_queue=args.max_queue,
        max_batch=args.max_batch,
        max_parked=args.max_parked,
        max_input_chars=args.max_input_chars,
        max_ref_bytes=args.max_ref_bytes,
        stream_idle_timeout=args.stream_idle_timeout,
        socket_idle_timeout=args.socket_idle_timeout,
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        keep_alive_timeout=args.keep_alive_timeout,
        shutdown_timeout=args.shutdown_timeout,
        voices_dir=Path(args.voices_dir) if args.voices_dir else None,
        books_dir=Path(args.books_dir) if args.books_dir else None,
        max_books=args.max_books,
        voice_aliases=tuple(parse_aliases(args.voice_alias).items()),
        allowed_local_media_path=(
            Path(args.allowed_local_media_path) if args.allowed_local_media_path else None
        ),
        normalize=args.normalize,
        quantize=args.quantize,
        backend=args.backend,
        lexicon=load_lexicon(args.lexicon) if args.lexicon else None,
        wyoming_port=args.wyoming_port,
        wyoming_host=args.wyoming_host,
        http=args.http,
    )


def run(args: argparse.Namespace) -> None:
    import mlx_speech

    from ..server import check_ports, serve

    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    settings = server_settings(args)
    check_ports(settings)  # before the log says where it listens
    log = logging.getLogger("mlx_speech.server")
    if sys.platform == "linux":  # where MLX's CPU work may lack a fast BLAS
        log.info("BLAS: %s", blas_name())
    if not mlx_compiled_here_before():
        log.info(FIRST_COMPILE_NOTICE)
    if not settings.http:
        log.info("loading %s in the background", settings.model)
        serve(settings, mlx_speech.load)
        return
    address = f"http://{settings.host}:{settings.port}"
    log.info(
        "loading %s in the background; listening on %s meanwhile (OpenAI base_url "
        "%s/v1; /health answers 503 until the model is ready)",
        settings.model,
        address,
        address,
    )
    # uvicorn logs through ours (one format); its lines and the access log
    # only at debug.
    debug = args.log_level == "debug"
    uvicorn_level = args.log_level if debug or args.log_level == "error" else "warning"
    serve(
        settings,
        mlx_speech.load,
        log_config=None,
        log_level=uvicorn_level,
        access_log=debug,
    )
