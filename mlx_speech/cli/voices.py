"""``mlx-speech voices``: list, add, remove and push saved voices, offline."""

from __future__ import annotations

import argparse
import os

from ..errors import shown
from ..regular_files import open_regular
from .arguments import (
    VOICES_DIR_HELP,
    setting,
)


def add_parser(commands) -> None:
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


def run(args: argparse.Namespace) -> None:
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
    limit = setting("max_ref_bytes")
    try:
        handle = open_regular(name)
    except OSError:  # missing, a directory, a FIFO, a device
        raise RuntimeError(f"{shown(name)} is not an audio file") from None
    with handle:
        clip = handle.read(limit + 1)
    if len(clip) > limit:
        raise RuntimeError(f"{shown(name)} is larger than {limit} bytes")
    return clip
