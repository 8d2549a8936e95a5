"""``POST /v1/audio/speech`` bodies: every field checked before a job is queued."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from ...audio.formats import FORMATS, RESPONSE_FORMATS
from ...errors import shown
from ...families.options import SamplingOptions
from ...request import SpeechRequest
from ...settings import ServerSettings
from ...text.pauses import Pause
from ...text.segments import SPLITS
from ...text.tags import VoiceChange, split_tags
from ..errors import ApiError
from .delivery import DeliveryMode
from .media import read_local_media

SAMPLING_FIELDS = tuple(option.name for option in dataclasses.fields(SamplingOptions))
MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 8000, 48000
# OpenAI documents ``pcm`` as 24 kHz; its clients play it at that rate.
PCM_RATE = 24000


# What an unknown voice's error tells an HTTP client to look at
VOICE_HINT = "GET /v1/audio/voices lists the available ones"


@dataclass(frozen=True)
class RequestRules:
    """What the server allows while parsing a request."""

    max_ref_bytes: int
    media_root: Path | None = None
    default_format: str = "mp3"


def request_rules(settings: ServerSettings) -> RequestRules:
    """The rules ``settings`` set for a speech request's fields."""
    return RequestRules(
        max_ref_bytes=settings.max_ref_bytes,
        media_root=settings.allowed_local_media_path,
        default_format=settings.default_format,
    )


@dataclass(frozen=True)
class HttpSpeech:
    """A speech request (``speech``, which ``TTS`` resolves) and how HTTP
    delivers its audio."""

    speech: SpeechRequest
    response_format: str
    sample_rate: int | None  # None: the model's rate
    delivery: DeliveryMode
    captions: str | None = None  # the split each caption covers; None: no captions
    timestamps: bool = True  # captioned JSON lists them (Kokoro's return_timestamps)


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param)


def _optional_string(body: dict, name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise _bad(name, f"{name} must be a string")
    return value


def _text(body: dict) -> str:
    """``input``'s shape; its length is ``TTS.resolve``'s to check."""
    text = body.get("input")
    if not isinstance(text, str):
        raise _bad("input", "input is required and must be a string")
    if not text.strip():
        raise _bad("input", "input must not be empty")
    return text


ACCEPTED_REFERENCES = (
    "base64, a data: URI, or a file:// URI or absolute path under "
    "--allowed-local-media-path (or a list of these: the first is used)"
)
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def _looks_like_base64(value: str) -> bool:
    return len(value) % 4 == 0 and _BASE64.fullmatch(value) is not None


def _reference_bytes(value: Any, param: str, rules: RequestRules) -> bytes:
    if isinstance(value, list):  # vLLM-Omni takes lists; our families use one clip
        if not value:
            raise _bad(param, f"{param} is an empty list; send {ACCEPTED_REFERENCES}")
        value = value[0]
    if not isinstance(value, str) or not value:
        raise _bad(param, f"{param} must be {ACCEPTED_REFERENCES}")
    scheme = value.split(":", 1)[0].lower() if ":" in value[:16] else ""
    if scheme in ("http", "https"):
        raise _bad(
            param,
            f"{param}: URLs are not fetched by the server; "
            "upload the clip or send it base64",
        )
    # Base64 may start with "/" too (MP3 frames do); a path rarely is valid base64.
    if scheme == "file" or (value.startswith("/") and not _looks_like_base64(value)):
        return read_local_media(value, rules.media_root, rules.max_ref_bytes, param)
    payload = value
    if scheme == "data":
        header, _, payload = value.partition(",")
        if not header.endswith(";base64"):
            raise _bad(param, f"{param}: data: URIs must be base64 encoded")
    if len(payload) * 3 // 4 > rules.max_ref_bytes:
        raise ApiError(
            413, f"{param} is larger than {rules.max_ref_bytes} bytes", param=param
        )
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(
            param, f"{param} is not valid base64; send {ACCEPTED_REFERENCES}"
        ) from None


def _voice(body: dict, rules: RequestRules) -> tuple[Any, Any]:
    """(the voice asked: a name, a clip's bytes or None; ref_text)."""
    voice = body.get("voice")
    ref_text = _optional_string(body, "ref_text")
    if isinstance(voice, dict):
        if "ref_audio" in voice:
            ref_text = voice.get("ref_text", ref_text)
            if ref_text is not None and not isinstance(ref_text, str):
                raise _bad("voice", "voice.ref_text must be a string")
            return _reference_bytes(voice["ref_audio"], "voice.ref_audio", rules), ref_text
        voice = voice.get("id")
        if not isinstance(voice, str):
            raise _bad(
                "voice",
                'voice objects are {"id": NAME} or {"ref_audio": ..., "ref_text": ...}',
            )
    if voice is not None and not isinstance(voice, str):
        raise _bad("voice", "voice must be a string or an object")
    if body.get("ref_audio") is not None:  # the clip wins over a name, as in vLLM-Omni
        return _reference_bytes(body["ref_audio"], "ref_audio", rules), ref_text
    return voice, ref_text


def _format(body: dict, default: str) -> str:
    response_format = body.get("response_format")
    if response_format is None:
        return default
    if not isinstance(response_format, str) or response_format not in RESPONSE_FORMATS:
        supported = ", ".join(RESPONSE_FORMATS)
        raise _bad(
            "response_format",
            f"response_format must be one of {supported}, got {shown(response_format)}",
        )
    return response_format


def _sample_rate(body: dict, response_format: str) -> int | None:
    rate = body.get("sample_rate")
    if rate is None:
        return PCM_RATE if response_format == "pcm" else None
    if isinstance(rate, bool) or not isinstance(rate, int):
        raise _bad("sample_rate", "sample_rate must be an integer")
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise _bad(
            "sample_rate",
            f"sample_rate must be in {MIN_SAMPLE_RATE}..{MAX_SAMPLE_RATE}, got {rate}",
        )
    allowed = FORMATS[response_format].rates
    if allowed and rate not in allowed:
        rates = ", ".join(map(str, allowed))
        raise _bad(
            "sample_rate", f"{response_format} supports sample_rate {rates}; got {rate}"
        )
    return rate


def _normalize(body: dict) -> bool | None:
    """``normalize``, or Kokoro-FastAPI's ``normalization_options.normalize``
    (its finer switches have no counterpart here); ``None``: the server's
    default."""
    normalize = body.get("normalize")
    options = body.get("normalization_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("normalization_options", "normalization_options must be an object")
    if normalize is None and options is not None:
        normalize = options.get("normalize")
        name = "normalization_options.normalize"
    else:
        name = "normalize"
    if normalize is not None and not isinstance(normalize, bool):
        raise _bad(name, f"{name} must be true or false")
    return normalize


def _switch(body: dict, name: str, default: bool | None) -> bool | None:
    """``body[name]``, which must be true or false; ``default`` when it is
    absent or null."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(name, f"{name} must be true or false")
    return value


def _delivery(body: dict) -> DeliveryMode:
    """OpenAI's default (a streamed file) when neither field is sent;
    vLLM-Omni's meaning of ``stream`` when only it is sent; ``stream_format``
    decides whenever it is sent."""
    stream = _switch(body, "stream", None)
    stream_format = body.get("stream_format")
    if stream_format is None:
        if stream is None:
            return DeliveryMode.AUDIO
        return DeliveryMode.SSE if stream else DeliveryMode.BUFFERED
    if not isinstance(stream_format, str) or stream_format not in ("audio", "sse"):
        raise _bad(
            "stream_format",
            f"stream_format must be 'audio' or 'sse', got {shown(stream_format)}",
        )
    return DeliveryMode(stream_format)


def parse_speech_request(body: Any, rules: RequestRules) -> HttpSpeech:
    """The body's fields, each of the shape it must have; what they mean (the
    voice, the pace, the limits, the family's fields) ``TTS`` checks."""
    if not isinstance(body, dict):
        raise _bad("body", "the request body must be a JSON object")
    return _parsed(body, rules, _text(body))


def parse_speech_options(body: dict, rules: RequestRules) -> HttpSpeech:
    """``parse_speech_request`` of all but ``input``: a request whose text
    comes later, in pieces (a WebSocket session's ``session.config``)."""
    return _parsed(body, rules, "")


def _parsed(body: dict, rules: RequestRules, text: str) -> HttpSpeech:
    _optional_string(body, "model")
    _optional_string(body, "task_type")  # vLLM-Omni's; the checkpoint decides here
    speech = parse_speech_fields(body, rules, text)
    response_format = _format(body, rules.default_format)
    sample_rate = _sample_rate(body, response_format)
    delivery = _delivery(body)
    captions = _captions(body, delivery)
    return HttpSpeech(speech, response_format, sample_rate, delivery, captions)


def parse_speech_fields(body: dict, rules: RequestRules, text: str = "") -> SpeechRequest:
    """The voice, the options and the sampling fields of a request to speak
    ``text`` (what a book job takes too), each of the shape it must have."""
    voice, ref_text = _voice(body, rules)
    return SpeechRequest(
        text,
        voice,
        ref_text=ref_text,
        instructions=_optional_string(body, "instructions"),
        language=_optional_string(body, "language"),
        speed=body.get("speed"),
        normalize=_normalize(body),
        channels=body.get("channels"),
        sampling={name: body.get(name) for name in SAMPLING_FIELDS},
        voice_paths=False,
        voice_hint=VOICE_HINT,
    )


def parse_captioned_request(body: Any, rules: RequestRules) -> HttpSpeech:
    """``POST /dev/captioned_speech`` (Kokoro-FastAPI's): the speech fields,
    with ``stream`` (default true: a JSON line per segment; false: one JSON
    object) and ``return_timestamps`` (default true)."""
    if not isinstance(body, dict):
        raise _bad("body", "the request body must be a JSON object")
    stream, timestamps = (_switch(body, name, True) for name in _KOKORO_SWITCHES)
    speech = {key: value for key, value in body.items() if key not in _KOKORO_ONLY}
    parsed = parse_speech_request(
        {**speech, "stream_format": "sse", "captions": True}, rules
    )
    delivery = DeliveryMode.CAPTIONED if stream else DeliveryMode.CAPTIONED_WHOLE
    return dataclasses.replace(parsed, delivery=delivery, timestamps=timestamps)


def parse_dialogue_request(body: Any, rules: RequestRules) -> HttpSpeech:
    """``POST /dev/dialogue`` (Kokoro-FastAPI's): ``turns`` (or ``inputs``)
    of ``{"voice" (or "voice_id"), "text"}``, ``pause_between_turns``
    seconds (0 to 10), and the speech fields; ``stream`` (default true)
    streams the file, false sends it whole. The turns become an SSML
    document, so each is spoken as it would be alone, in its voice."""
    if not isinstance(body, dict):
        raise _bad("body", "the request body must be a JSON object")
    turns = body.get("turns", body.get("inputs"))
    if not isinstance(turns, list) or not turns:
        raise _bad("turns", "turns must be a list of {voice, text}, at least one")
    pause = body.get("pause_between_turns")
    pause = 0.0 if pause is None else pause
    if (
        isinstance(pause, bool)
        or not isinstance(pause, int | float)
        or not 0 <= pause <= 10
    ):
        raise _bad("pause_between_turns", "pause_between_turns must be 0 to 10 seconds")
    stream = _switch(body, "stream", None)
    spoken = [_turn_ssml(turn, number) for number, turn in enumerate(turns)]
    gap = f'<break time="{pause:.3f}s"/>' if pause > 0 else " "
    speech = {k: v for k, v in body.items() if k not in _DIALOGUE_ONLY}
    speech["input"] = "<speak>" + gap.join(spoken) + "</speak>"
    if stream is False:
        speech["stream"] = False  # the file whole
    return parse_speech_request(speech, rules)


_DIALOGUE_ONLY = ("turns", "inputs", "pause_between_turns", "stream", "stream_format")


def _turn_ssml(turn: Any, number: int) -> str:
    """One turn as SSML: its text in its voice, its pause tags as breaks."""
    where = f"turns[{number}]"
    if not isinstance(turn, dict):
        raise _bad(where, f"{where} must be an object with a voice and a text")
    voice, text = turn.get("voice", turn.get("voice_id")), turn.get("text")
    if not isinstance(voice, str) or not voice.strip():
        raise _bad(f"{where}.voice", f"{where}.voice must be a voice's name")
    if not isinstance(text, str) or not text.strip():
        raise _bad(f"{where}.text", f"{where}.text must be a text to say")
    # its voice tags switch voices within the turn, as everywhere
    runs = [[voice.strip(), ""]]
    for part in split_tags(text):
        if isinstance(part, VoiceChange):
            runs.append([part.voice, ""])
        elif isinstance(part, Pause):
            runs[-1][1] += f'<break time="{part.seconds:.3f}s"/>'
        else:
            runs[-1][1] += escape(part)
    return "".join(f"<voice name={quoteattr(name)}>{said}</voice>" for name, said in runs)


_KOKORO_SWITCHES = ("stream", "return_timestamps")  # default true
_KOKORO_ONLY = ("stream", "stream_format", "return_timestamps", "captions")


def _captions(body: dict, delivery: DeliveryMode) -> str | None:
    """``captions: true`` asks for a caption per segment (``split_granularity``:
    sentence, the default, clause or none), sent as SSE events; without it
    ``split_granularity`` is ignored."""
    captions = _switch(body, "captions", False)
    split = body.get("split_granularity")
    if not captions:
        return None
    if delivery is not DeliveryMode.SSE:
        raise _bad(
            "captions",
            "captions come as SSE events (stream_format 'sse'), or from "
            "POST /dev/captioned_speech",
        )
    if split is None:
        return "sentence"
    if split not in SPLITS:
        splits = ", ".join(SPLITS)
        raise _bad("split_granularity", f"split_granularity must be one of {splits}")
    return split
