"""What a clip to clone and its transcript may be, saved or sent with a
request, on every surface."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRequest

MIN_CLIP_SECONDS, MAX_CLIP_SECONDS = 0.5, 30.0
MAX_CLIP_CHANNELS = 8
MAX_CLIP_RATE = 384_000
MAX_REF_TEXT_CHARS = 2000  # a 30 s clip's transcript fits many times over


def check_clip_header(
    seconds: float, channels: int, rate: int, param: str, slack: float = 0.0
) -> None:
    """Refuse a clip by its header, before its samples are decoded: a few
    kilobytes of file can describe gigabytes of audio. ``slack`` widens the
    length bounds where an exact check follows the decode."""
    if rate > MAX_CLIP_RATE or channels > MAX_CLIP_CHANNELS:
        raise InvalidRequest(
            param,
            f"the clip has {channels} channels at {rate} Hz; clips may have up to "
            f"{MAX_CLIP_CHANNELS} channels at up to {MAX_CLIP_RATE} Hz",
        )
    if not MIN_CLIP_SECONDS - slack <= seconds <= MAX_CLIP_SECONDS + slack:
        raise InvalidRequest(
            param,
            f"the clip is {seconds:.2f} s; clips must be "
            f"{MIN_CLIP_SECONDS}-{MAX_CLIP_SECONDS:g} s",
        )


def decoding_failure(error: Exception) -> str:
    """What libsndfile said, without the Python object it was reading."""
    return getattr(error, "error_string", None) or "not a supported audio format"


def check_unicode(name: str, text: str) -> None:
    """Text a tokenizer can take: no lone surrogates (JSON's "\\ud800", or
    undecodable bytes in a command line)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidRequest(
            name, f"{name} is not valid Unicode (a lone surrogate at {error.start})"
        ) from None


def check_ref_text(ref_text: Any) -> None:
    """``None`` (absent) or a transcript of bounded length."""
    if ref_text is None:
        return
    if not isinstance(ref_text, str):
        raise InvalidRequest("ref_text", "ref_text must be a string")
    if len(ref_text) > MAX_REF_TEXT_CHARS:
        raise InvalidRequest(
            "ref_text",
            f"ref_text is {len(ref_text)} characters; a clip's transcript may have "
            f"{MAX_REF_TEXT_CHARS}",
        )
    check_unicode("ref_text", ref_text)
