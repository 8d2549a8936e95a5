"""Pauses: exact silence between the parts of a text (its pause tags,
``tags``, or SSML breaks). Each part around them is spoken as a request of
its own (its edges faded where it meets another: ``joins``), and each pause
is silence in its place, streamed like the audio around it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..audio.events import AudioEvents, Seam
from ..audio.joins import faded
from ..audio.samples import Audio
from ..errors import InvalidRequest

# A request's pauses together: silence is cheap to make but not to hold
# (a buffered answer keeps all of it).
MAX_PAUSE_SECONDS = 60.0
_SILENCE_CHUNK_SECONDS = 0.25


@dataclass(frozen=True)
class Pause:
    seconds: float

    def samples(self, rate: int) -> int:
        return round(self.seconds * rate)


def pause_seconds(parts: Iterable[object]) -> float:
    """The seconds of the ``Pause``s among ``parts``."""
    return sum(part.seconds for part in parts if isinstance(part, Pause))


def check_pauses(total: float) -> None:
    """The one cap on a request's silence, whatever form its pauses take
    (tags, SSML breaks, a dialogue's gaps)."""
    if total > MAX_PAUSE_SECONDS:
        raise InvalidRequest(
            "text",
            f"the pauses add up to {total:g} s; a request may have at most "
            f"{MAX_PAUSE_SECONDS:g} s of them",
        )


class PausedStream(AudioEvents):
    """The audio of a text with pauses: each part's stream, opened when the
    one before it has ended, and each pause's silence, in order. Iterating
    gives the ``Audio`` chunks; ``events()`` gives them with a ``Seam``
    between two parts. ``cancel()`` stops the part being spoken and the rest."""

    def __init__(
        self,
        items: list[Callable[[], Any] | Pause],
        sample_rate: int,
        channels: int,
        ignored: tuple[str, ...],
    ):
        self.ignored = ignored
        self._sample_rate = sample_rate
        self._channels = channels
        self._current: Any = None
        self._cancelled = False
        self._ran_out = False
        self._events = self._all(items)

    def _all(self, items: list) -> Iterator[Audio | Seam]:
        last = len(items) - 1
        for number, item in enumerate(items):
            if self._cancelled:
                return
            if number:
                yield Seam()
            if isinstance(item, Pause):
                yield from self._silence(item.samples(self._sample_rate))
                continue
            self._current = item()
            # a part meeting another part or a pause is joined without a click
            yield from faded(self._current, self._sample_rate, number > 0, number < last)
            self._ran_out = self._ran_out or getattr(self._current, "result", None) is True
            self._current = None

    def _silence(self, samples: int) -> Iterator[Audio]:
        most = round(_SILENCE_CHUNK_SECONDS * self._sample_rate)
        shape = (lambda n: (n, self._channels)) if self._channels > 1 else (lambda n: (n,))
        while samples > 0 and not self._cancelled:
            count = min(most, samples)
            yield Audio(np.zeros(shape(count), dtype=np.float32), self._sample_rate)
            samples -= count

    @property
    def result(self) -> bool:
        """Whether a part's generation ran to its frame budget."""
        return self._ran_out

    def cancel(self) -> None:
        self._cancelled = True
        if self._current is not None:
            self._current.cancel()

    close = cancel
