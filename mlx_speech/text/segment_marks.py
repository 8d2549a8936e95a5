"""The marks around each segment's audio in a text stream's events, and
after the segments of a commit."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SegmentStarted:
    index: int
    text: str


@dataclass(frozen=True)
class SegmentEnded:
    index: int
    text: str


@dataclass(frozen=True)
class Committed:
    """The text fed before a ``TextFeed.commit()`` is all spoken: its
    segments' marks and audio came before this."""
