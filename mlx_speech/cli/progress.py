"""A book's progress as it is spoken, then as it is written: a bar on a
terminal (tqdm), a plain line every ``LINE_SECONDS`` elsewhere (a log, a
pipe); both say where it is, how much is done and the time left."""

from __future__ import annotations

import threading
import time
from typing import TextIO

from tqdm import tqdm

from ..book.speaker import SentenceSpoken
from ..book.speech import BookSpeech

LINE_SECONDS = 10.0


class BookProgress:
    def __init__(self, speech: BookSpeech, kept: set[str], audio_samples: int, out: TextIO):
        """``kept``: the keys already spoken; ``audio_samples``: their audio."""
        self._speech = speech
        self._done = set(kept)
        self._samples = audio_samples
        self._first_waiting = 0  # the earliest sentence not yet spoken
        self._lock = threading.Lock()
        self._out = out
        self._started = time.monotonic()
        self._reused = self._count_done()
        self._last_line = self._started
        self._bar = None
        if out.isatty():
            total = len(speech.sentences)
            self._bar = tqdm(total=total, initial=self._reused, unit="sentence", file=out)
            self._show()

    def __call__(self, spoken: SentenceSpoken) -> None:
        with self._lock:
            self._done.add(spoken.sentence.key)
            self._samples += spoken.samples
            if self._bar is not None:
                self._bar.update(1)
                self._show()
            elif time.monotonic() - self._last_line >= LINE_SECONDS:
                self._last_line = time.monotonic()
                print(self.line(), file=self._out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def _count_done(self) -> int:
        return sum(sentence.key in self._done for sentence in self._speech.sentences)

    def _chapter(self) -> str:
        sentences = self._speech.sentences
        while (
            self._first_waiting < len(sentences)
            and sentences[self._first_waiting].key in self._done
        ):
            self._first_waiting += 1
        index = sentences[min(self._first_waiting, len(sentences) - 1)].chapter
        chapters = self._speech.book.chapters
        return f"chapter {index + 1}/{len(chapters)}: {chapters[index].title}"

    def _minutes(self) -> float:
        return self._samples / self._speech.rate / 60

    def _show(self) -> None:
        self._bar.set_description(_short(self._chapter(), 40), refresh=False)
        self._bar.set_postfix_str(f"{self._minutes():.1f} min of audio")

    def line(self) -> str:
        """The plain report of where the book is."""
        done, total = self._count_done(), len(self._speech.sentences)
        elapsed = time.monotonic() - self._started
        spoken_now = done - self._reused
        left = "unknown"
        if spoken_now:
            left = f"about {_clock(elapsed / spoken_now * (total - done))}"
        return (
            f"book: {self._chapter()}, {done}/{total} sentences, "
            f"{self._minutes():.1f} min of audio, time left {left}"
        )


def _short(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s"


class WritingProgress:
    """The book's audio encoded into its file, in minutes of it."""

    def __init__(self, total_samples: int, rate: int, out: TextIO):
        self._total = total_samples
        self._rate = rate
        self._done = 0
        self._out = out
        self._started = self._last_line = time.monotonic()
        self._bar = None
        if out.isatty():
            self._bar = tqdm(
                total=round(total_samples / rate / 60, 1),
                unit="min",
                file=out,
                desc="writing",
            )

    def __call__(self, samples: int) -> None:
        self._done += samples
        if self._bar is not None:
            self._bar.n = round(self._done / self._rate / 60, 1)
            self._bar.refresh()
        elif time.monotonic() - self._last_line >= LINE_SECONDS:
            self._last_line = time.monotonic()
            print(self.line(), file=self._out, flush=True)

    def line(self) -> str:
        elapsed = time.monotonic() - self._started
        left = "unknown"
        if self._done:
            left = f"about {_clock(elapsed / self._done * (self._total - self._done))}"
        return (
            f"book: writing, {self._done / self._rate / 60:.1f} of "
            f"{self._total / self._rate / 60:.1f} min of audio, time left {left}"
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
