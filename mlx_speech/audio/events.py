"""Streams whose audio chunks come with markers between them: where a
text's segments start and end (``TextStream``), the seams between parts
spoken apart (``PausedStream``). Iterating one gives its ``Audio`` chunks;
``events()`` gives them with the markers, for the transports that use them
(captions, resampling afresh at a seam)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .samples import Audio


@dataclass(frozen=True)
class Seam:
    """Where one part's audio (or a pause) ends and the next begins: a
    resampler starts afresh there, so a pause stays exact silence at any
    output rate."""


class AudioEvents:
    """The chunks and markers of ``_events``, which a subclass sets."""

    _events: Iterator[Any]

    def __iter__(self) -> AudioEvents:
        return self

    def __next__(self) -> Audio:
        for event in self._events:
            if isinstance(event, Audio):
                return event
        raise StopIteration

    def events(self) -> Iterator[Any]:
        return self._events


def events_of(stream: Any) -> Iterator[Any]:
    """``stream``'s chunks with their markers where it has them, else its
    chunks alone."""
    return stream.events() if isinstance(stream, AudioEvents) else iter(stream)
