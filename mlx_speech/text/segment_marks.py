"""The marks around each segment's audio in a text stream's events."""

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
