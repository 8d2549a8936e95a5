"""A session's ``session.config``: the speech request's fields (no text:
it comes in pieces), how the text is split, and how audio is sent."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...text.segments import SPLITS
from ..errors import ApiError
from ..speech.request import HttpSpeech, RequestRules, parse_speech_options

SOCKET_FORMAT = "wav"  # vLLM-Omni's default here (not the HTTP default)


@dataclass(frozen=True)
class SocketConfig:
    request: HttpSpeech  # voice, format, rate and options; its text is unused
    split: str
    stream_audio: bool


def parse_socket_config(message: dict, rules: RequestRules) -> SocketConfig:
    """A ``session.config`` message (``ApiError`` 400 if it is wrong)."""
    body = {key: value for key, value in message.items() if key != "type"}
    split = body.pop("split_granularity", None) or "none"
    if split not in SPLITS:
        raise ApiError(400, f"split_granularity must be one of {', '.join(SPLITS)}")
    stream_audio = body.pop("stream_audio", False)
    if not isinstance(stream_audio, bool):
        raise ApiError(400, "stream_audio must be true or false")
    if body.pop("word_timestamps", False):
        raise ApiError(400, "word_timestamps is not supported by this server")
    if "speaker" in body:  # vLLM-Omni's other name for it
        body.setdefault("voice", body.pop("speaker"))
    for name in ("stream", "stream_format"):
        body.pop(name, None)  # the socket decides how audio is sent
    rules = dataclasses.replace(rules, default_format=SOCKET_FORMAT)
    request = parse_speech_options(body, rules)
    if stream_audio and request.response_format != "pcm":
        raise ApiError(400, "stream_audio needs response_format 'pcm'")
    return SocketConfig(request, split, stream_audio)
