"""``SpeechStream``: what every adapter reads, whichever stream a request
opened (one job's chunks, at a pace, with pauses, or a text spoken as it
is written)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from ..audio.samples import Audio


class SpeechStream(Protocol):
    """Iterated, its ``Audio`` chunks as they are made (``audio.events
    .events_of`` adds the markers between them, where it has them);
    ``ignored``, the request's fields the model did not use; ``cancel()``
    stops what is being spoken and what would follow."""

    ignored: tuple[str, ...]

    def __iter__(self) -> Iterator[Audio]: ...

    def __next__(self) -> Audio: ...

    def cancel(self) -> None: ...
