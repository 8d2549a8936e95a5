"""``mlx-speech``: the command line."""

from __future__ import annotations

import argparse
import codecs
import dataclasses
import gc
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from .. import DEFAULT_MODEL
from ..audio.formats import FORMATS, RESPONSE_FORMATS, format_for_path
from ..backends import (
    BACKEND_VARIABLE,
    BACKENDS,
    FIRST_COMPILE_NOTICE,
    mlx_compiled_here_before,
)
from ..errors import ModelNotFetched, shown
from ..families import QUANTIZE_BITS
from ..host_engine.blas import active_blas, use_fast_blas
from ..regular_files import open_regular
from ..settings import ServerSettings
from ..text.lexicon import load_lexicon
from ..text.segments import SPLITS
from ..voices.resolve import parse_aliases

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
VOICES_DIR_HELP = (
    "directory of saved voices (default: ~/.local/share/mlx-speech/voices, or "
    "~/Library/Application Support/mlx-speech/voices on macOS)"
)


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, like every other error of the command."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _model_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=None,
        help=f"checkpoint directory or hub id (default: {DEFAULT_MODEL})",
    )


def _quantize_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quantize",
        type=int,
        default=None,
        choices=QUANTIZE_BITS,
        help="quantize MOSS-TTS-Nano's transformer weights to this many bits as they "
        "load (less memory; the codec stays float; default: as stored)",
    )


def _backend_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        default=None,
        choices=BACKENDS,
        help="what runs the model: mlx (MLX alone, as on a Mac), host (MOSS-TTS-Nano's "
        "host engine on Linux's CPU, the rest through MLX) or auto (host where it "
        f"can run, else mlx; default: ${BACKEND_VARIABLE}, else auto)",
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


def _speak_parser(commands) -> None:
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
    _model_argument(speak)
    _quantize_argument(speak)
    _backend_argument(speak)
    voice = speak.add_mutually_exclusive_group()
    voice.add_argument(
        "--voice",
        default=None,
        help="'default', a preset or saved voice name, or a reference audio file",
    )
    voice.add_argument(
        "--ref-audio", default=None, metavar="FILE", help="reference clip to clone"
    )
    speak.add_argument(
        "--ref-text",
        default=None,
        help="transcript of the reference clip, for models that use it",
    )
    speak.add_argument(
        "--instructions", default=None, help="voice description or speaking style"
    )
    speak.add_argument("--language", default=None, help="language (default: auto)")
    speak.add_argument(
        "--speed",
        type=float,
        default=None,
        help="pace, 0.25 to 4.0; pitch is kept (default: 1.0)",
    )
    speak.add_argument(
        "--channels",
        type=int,
        default=None,
        choices=[1, 2],
        help="2: a stereo model's own channels (MOSS-TTS-Nano) instead of a mono mix "
        "(default: 1)",
    )
    _no_normalize_argument(speak, "give the model the text as written")
    _lexicon_argument(speak)
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
    for name, kind, text in SAMPLING_FLAGS:
        flag = "--" + name.replace("_", "-")
        speak.add_argument(flag, type=kind, default=None, help=text)
    speak.add_argument("--voices-dir", default=None, help=VOICES_DIR_HELP)


def _lexicon_argument(parser) -> None:
    parser.add_argument(
        "--lexicon",
        default=None,
        metavar="FILE",
        help="say words otherwise before normalization: a W3C PLS file, or lines "
        "'WRITTEN = SAID' (e.g. 'SQL = sequel')",
    )


def _no_normalize_argument(parser, gives: str) -> None:
    parser.add_argument(
        "--no-normalize",
        dest="normalize",
        action="store_false",
        help=f"{gives}; without it, numbers, symbols and "
        "dates are read out first (see 'mlx-speech normalize')",
    )


def _normalize_parser(commands) -> None:
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
    _lexicon_argument(normalize)


def _normalize(args: argparse.Namespace) -> None:
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


def _setting(name: str):
    """The server's default for a setting (``ServerSettings``, the one source)."""
    return next(f.default for f in dataclasses.fields(ServerSettings) if f.name == name)


def _serve_parser(commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the OpenAI-compatible speech server",
        description="Serve /v1/audio/speech (OpenAI and vLLM-Omni compatible), "
        "/v1/audio/voices, /v1/models, /health and /metrics.",
    )
    _model_argument(serve)
    _quantize_argument(serve)
    _backend_argument(serve)
    host, port = _setting("host"), _setting("port")
    serve.add_argument(
        "--host", default=host, help=f"address to listen on (default: {host})"
    )
    serve.add_argument("--port", type=int, default=port, help=f"port (default: {port})")
    _wyoming_arguments(serve)
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
    default_format = _setting("default_format")
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
    serve.add_argument("--voices-dir", default=None, help=VOICES_DIR_HELP)
    _no_normalize_argument(
        serve,
        "give the model each request's text as written, unless the request "
        "sends normalize: true",
    )
    _lexicon_argument(serve)
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
            _positive_int,
            "requests stepped together in one forward pass; 1 turns batching off",
        ),
        (
            "max_parked",
            int,
            "streams kept while their clients do not read; more wait to start",
        ),
        ("max_input_chars", int, "longest accepted input text, in characters"),
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
        default = _setting(name)
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


def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    import mlx_speech
    from mlx_speech.server import create_app, uvicorn_config
    from mlx_speech.serving.state import server_state

    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    settings = server_settings(args)
    address = f"http://{settings.host}:{settings.port}"
    log = logging.getLogger("mlx_speech.server")
    if sys.platform == "linux":  # where MLX's CPU work may lack a fast BLAS
        log.info("BLAS: %s", active_blas())
    if not mlx_compiled_here_before():
        log.info(FIRST_COMPILE_NOTICE)
    if not settings.http:
        log.info("loading %s in the background", settings.model)
        _serve_wyoming_alone(server_state(settings, mlx_speech.load))
        return
    app = create_app(settings, mlx_speech.load)
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
    config = uvicorn_config(
        app, settings, log_level=uvicorn_level, log_config=None, access_log=debug
    )
    server = uvicorn.Server(config)
    slot = app.state.slot
    slot.on_failure = lambda error: setattr(server, "should_exit", True)
    slot.on_loaded = _keep_loaded_objects_from_the_collector
    _run_until_signalled(server, app.state, settings.shutdown_timeout)
    if slot.error is not None:
        raise RuntimeError(f"could not load the model: {slot.error}")
    if not server.started:
        raise RuntimeError(f"could not serve on {address} (see the log above)")


def _serve_wyoming_alone(state) -> None:
    """The server's life (the model, the engine, the Wyoming listener)
    without HTTP, until SIGINT or SIGTERM; then what is being spoken may
    finish for the grace, as ``_run_until_signalled`` lets it."""
    import anyio

    from ..serving.lifetime import serving
    from ..serving.shutdown import END_EARLY_SECONDS
    from ..wyoming_server import serve_wyoming

    slot = state.slot
    grace = state.settings.shutdown_timeout
    stopping = threading.Event()
    slot.on_failure = lambda error: stopping.set()
    slot.on_loaded = _keep_loaded_objects_from_the_collector

    def stop(signum, frame) -> None:
        stopping.set()
        state.shutdown.begin(grace)

    async def run() -> None:
        async with serving(state, [serve_wyoming]):
            while not stopping.is_set():
                await anyio.sleep(0.1)
            deadline = time.monotonic() + grace + END_EARLY_SECONDS
            while state.sockets.active and time.monotonic() < deadline:
                await anyio.sleep(0.05)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        anyio.run(run)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if slot.error is not None:
        raise RuntimeError(f"could not load the model: {slot.error}")


def _keep_loaded_objects_from_the_collector() -> None:
    """Moves what loading made (the model's modules, tokenizers, text
    normalization tables: about 116,000 objects) out of the cyclic garbage
    collector's scans. A full collection, which Python starts now and then
    while serving, scanned them all: 66 ms during which no stream got a
    frame; it now scans only what serving made (0.45 ms)."""
    gc.freeze()
    logging.getLogger("mlx_speech.server").debug(
        "%d objects from loading kept out of the garbage collector's scans",
        gc.get_freeze_count(),
    )


def _run_until_signalled(server, state, grace_seconds: float) -> None:
    """Serve in a thread; SIGINT/SIGTERM stop it gracefully (a second one forces)
    and the process then exits 0, as a service manager expects. uvicorn drops
    WebSocket sessions as soon as it stops, so it is told to stop once they
    have ended themselves (``http.speech_socket``) or the grace has passed."""
    from ..serving.shutdown import END_EARLY_SECONDS

    stopping = threading.Event()

    def exit_when_sockets_end() -> None:
        deadline = time.monotonic() + grace_seconds + END_EARLY_SECONDS
        while state.sockets.active and time.monotonic() < deadline:
            time.sleep(0.05)
        server.should_exit = True

    def stop(signum, frame) -> None:
        if stopping.is_set():
            server.force_exit = server.should_exit = True
            return
        stopping.set()
        state.shutdown.begin(grace_seconds)
        threading.Thread(target=exit_when_sockets_end, daemon=True).start()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=server.run, name="uvicorn")
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _voices_parser(commands) -> None:
    voices = commands.add_parser(
        "voices",
        help="manage saved voices (works offline, no model needed)",
        description="List, add or remove saved voices; the server and `speak --voice NAME` "
        "use them by name.",
    )
    actions = voices.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="list saved voices")
    add = actions.add_parser("add", help="save a voice from an audio file")
    add.add_argument("name", metavar="NAME", help="[A-Za-z0-9_.-]{1,64}")
    add.add_argument("file", metavar="FILE", help="a 0.5-30 s clip (wav, flac, ogg, mp3)")
    add.add_argument("--ref-text", default=None, help="what the clip says")
    remove = actions.add_parser("rm", help="remove a saved voice")
    remove.add_argument("name", metavar="NAME")
    push = actions.add_parser(
        "push",
        help="upload saved voices to a server with vLLM-Omni's voices API",
        description="Upload saved voices (clip and transcript) to URL's "
        "POST /v1/audio/voices: a vLLM-Omni deployment or another mlx-speech server.",
    )
    push.add_argument("url", metavar="URL", help="the server, e.g. http://gpu-box:8091")
    push.add_argument("names", metavar="NAME", nargs="*", help="voices (default: all)")
    push.add_argument(
        "--api-key",
        default=os.environ.get("MLX_SPEECH_API_KEY"),
        help="the server's key, sent as a bearer token (default: $MLX_SPEECH_API_KEY)",
    )
    for parser in (listing, add, remove, push):
        parser.add_argument("--voices-dir", default=None, help=VOICES_DIR_HELP)


def _voices(args: argparse.Namespace) -> None:
    from mlx_speech.voices.store import UnknownVoice, VoiceStore

    store = VoiceStore(args.voices_dir)
    if args.action == "list":
        voices = store.list()
        if not voices:
            print(
                f"no saved voices in {store.directory} (save one with: mlx-speech "
                "voices add NAME FILE)"
            )
        for voice in voices:
            text = f"  {voice.ref_text!r}" if voice.ref_text else ""
            print(f"{voice.name}\t{voice.duration_s:.2f} s{text}")
    elif args.action == "add":
        clip = _read_clip(args.file)
        replacing = store.find(args.name) is not None
        voice = store.add(args.name, clip, args.ref_text)
        replaced = ", replacing the voice of that name" if replacing else ""
        print(f"saved {voice.name} ({voice.duration_s:.2f} s) in {store.directory}", end="")
        print(replaced)
    elif args.action == "push":
        _push(store, args)
    else:
        try:
            store.remove(args.name)
        except UnknownVoice:
            raise RuntimeError(f"no saved voice named {shown(args.name)}") from None
        print(f"removed {args.name}")


def _push(store, args: argparse.Namespace) -> None:
    from mlx_speech.voices.push import push_voice, voices_url

    if args.names:
        unknown = [name for name in args.names if store.find(name) is None]
        if unknown:
            raise RuntimeError(f"no saved voice named {', '.join(map(shown, unknown))}")
        voices = [store.get(name) for name in args.names]
    else:
        voices = store.list()
    url = voices_url(args.url)
    failed = []
    for voice in voices:
        problem = push_voice(voice, url, args.api_key)
        print(f"{voice.name}: " + (f"failed, {problem}" if problem else f"pushed to {url}"))
        if problem:
            failed.append(voice.name)
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(voices)} voices were not pushed")


def _read_clip(name: str) -> bytes:
    """A clip file, read no further than the server would accept."""
    limit = _setting("max_ref_bytes")
    try:
        handle = open_regular(name)
    except OSError:  # missing, a directory, a FIFO, a device
        raise RuntimeError(f"{shown(name)} is not an audio file") from None
    with handle:
        clip = handle.read(limit + 1)
    if len(clip) > limit:
        raise RuntimeError(f"{shown(name)} is larger than {limit} bytes")
    return clip


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
    options = {
        "voice": Path(args.ref_audio) if args.ref_audio else args.voice,
        "ref_text": args.ref_text,
        "instructions": args.instructions,
        "language": args.language,
        "speed": args.speed,
        "channels": args.channels,
        "normalize": args.normalize,
        **{name: getattr(args, name) for name, _, _ in SAMPLING_FLAGS},
    }
    if args.text == "-":
        args.stdin = _StandardInput()
        return tts.stream_text(args.stdin, split=args.split, **options)
    if args.captions is not None:
        return tts.stream_text([args.text], split=args.split, **options)
    return tts.stream(args.text, **options)


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


def _speak(args: argparse.Namespace) -> None:
    import mlx_speech

    output = _checked_output(args)
    _checked_captions(args)
    if sys.stderr.isatty() and not mlx_compiled_here_before():
        print(f"note: {FIRST_COMPILE_NOTICE}", file=sys.stderr, flush=True)
    loading = time.perf_counter()
    tts = mlx_speech.load(
        args.model or DEFAULT_MODEL,
        voices_dir=args.voices_dir,
        quantize=args.quantize,
        backend=args.backend,
        lexicon=args.lexicon,
    )
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
    blas = f", BLAS: {active_blas()}" if tts.device == "cpu" else ""
    print(f"backend: {tts.backend} on {tts.device}{blas}")
    if getattr(stream, "ignored", ()):
        print(f"ignored (this model does not use them): {', '.join(stream.ignored)}")


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
    return output


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mlx-speech", description="Local text-to-speech on MLX.")
    commands = parser.add_subparsers(dest="command", required=True)
    _serve_parser(commands)
    _speak_parser(commands)
    _voices_parser(commands)
    _normalize_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # --help and usage errors end here, at once
    if args.command == "serve" and not args.http and args.wyoming_port is None:
        parser.error("--no-http serves Wyoming alone: it needs --wyoming-port")
    if argv is None and args.command in ("serve", "speak"):
        use_fast_blas()  # re-executes the command (parsed again) with OpenBLAS
    try:
        commands = {
            "serve": _serve,
            "speak": _speak,
            "voices": _voices,
            "normalize": _normalize,
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


if __name__ == "__main__":
    sys.exit(main())
