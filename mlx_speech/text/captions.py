"""Captions: each segment's text and where its audio lies in the audio
handed out, counted sample by sample as it goes out (so after ``speed`` and
any resampling, exact), and written as WebVTT or SubRip.

Text spoken as it is written (``TTS.stream_text``) comes segment by
segment: each is spoken alone, between ``SegmentStarted`` and
``SegmentEnded``, so its audio is exactly the samples between the two.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..audio.samples import Audio
from .segment_marks import SegmentEnded, SegmentStarted

CAPTION_FORMATS = ("vtt", "srt")


@dataclass(frozen=True)
class Caption:
    """Segment ``index``'s ``text``, its audio from sample ``start`` to
    ``end`` (exclusive) of the audio handed out, at ``rate``."""

    index: int
    text: str
    start: int
    end: int
    rate: int

    @property
    def start_seconds(self) -> float:
        return self.start / self.rate

    @property
    def end_seconds(self) -> float:
        return self.end / self.rate


class Timeline:
    """The captions of a text stream's events, in the order they go out:
    ``add`` each event, or ``count`` the samples each chunk became where the
    caller resamples it and ``end_segment`` at each ``SegmentEnded``. A
    segment starts where the one before it ended (or at its
    ``SegmentStarted``)."""

    def __init__(self, rate: int):
        self.rate = rate
        self.captions: list[Caption] = []
        self.samples = 0  # handed out so far
        self._start = 0

    def add(self, event: object) -> Caption | None:
        """The caption a ``SegmentEnded`` completes, else None."""
        if isinstance(event, SegmentStarted):
            self._start = self.samples
        elif isinstance(event, Audio):
            self.count(len(event.samples))
        elif isinstance(event, SegmentEnded):
            return self.end_segment(event)
        return None

    def count(self, samples: int) -> None:
        self.samples += samples

    def end_segment(self, ended: SegmentEnded) -> Caption:
        caption = Caption(ended.index, ended.text, self._start, self.samples, self.rate)
        self.captions.append(caption)
        self._start = self.samples
        return caption


def webvtt(captions: list[Caption]) -> str:
    cues = [
        f"{_clock(c.start, c.rate, '.')} --> {_clock(c.end, c.rate, '.')}\n{_cue_text(c)}"
        for c in captions
    ]
    return "WEBVTT\n\n" + "".join(cue + "\n\n" for cue in cues)


def srt(captions: list[Caption]) -> str:
    cues = [
        f"{number}\n{_clock(c.start, c.rate, ',')} --> {_clock(c.end, c.rate, ',')}\n"
        f"{_cue_text(c)}"
        for number, c in enumerate(captions, start=1)
    ]
    return "".join(cue + "\n\n" for cue in cues)


def _clock(sample: int, rate: int, decimal: str) -> str:
    """HH:MM:SS.mmm, the millisecond rounded down (a cue never ends after
    its audio)."""
    milliseconds = sample * 1000 // rate
    seconds, milliseconds = divmod(milliseconds, 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{decimal}{milliseconds:03d}"


def _cue_text(caption: Caption) -> str:
    """One line of the segment's text; "-->" and blank lines would end a cue."""
    return " ".join(caption.text.split()).replace("-->", "->")
