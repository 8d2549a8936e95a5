"""Speaking text while it is still being written.

Three parts run at once: a reader thread takes the caller's deltas and cuts
them into segments (``TextSegmenter``); a speaker thread runs each segment
through the engine as one job, putting its audio in order into one queue;
the caller reads that queue. The speaker starts segment k+1 while the
caller still plays segment k, but never runs more than one segment ahead of
what the caller has read, so a caller that stops reading stops the work;
and the reader holds at most ``SEGMENTS_QUEUED`` segments not yet spoken,
so it then stops reading the caller's text too (a producer faster than
speech is held back, not buffered without bound).

The caller's iterator is read on its own thread, so a producer that waits
for audio before writing more never deadlocks the reader of the audio.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
from collections.abc import AsyncIterable, Callable, Iterable, Iterator
from typing import Any

from ..audio.events import AudioEvents, events_of
from ..audio.samples import Audio
from .captions import Caption, Timeline
from .script import shown_text
from .segment_marks import Committed, SegmentEnded, SegmentStarted
from .segments import TextSegmenter

# Segments held (generated or generating) but not yet read to their end.
SEGMENTS_AHEAD = 2
# Segments cut from the text but not yet spoken.
SEGMENTS_QUEUED = 64
EMPTY_TEXT = "the text was empty: nothing to speak"


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


_END = object()
_COMMIT = Committed()


class TextFeed:
    """An iterable of text fed from another thread (or an event loop):
    ``put`` pieces, then ``end()``, or ``end(error)`` to fail its reader.
    ``commit()`` says the text so far is complete: it is spoken without
    waiting for more, and a ``Committed`` event follows its audio."""

    def __init__(self):
        self._pieces: queue.Queue = queue.Queue()

    def put(self, text: str) -> None:
        self._pieces.put(text)

    def commit(self) -> None:
        self._pieces.put(_COMMIT)

    def end(self, error: BaseException | None = None) -> None:
        self._pieces.put(_END if error is None else _Failure(error))

    def __iter__(self) -> Iterator[str]:
        while True:
            piece = self._pieces.get()
            if piece is _END:
                return
            if isinstance(piece, _Failure):
                raise piece.error
            yield piece


class TextStream(AudioEvents):
    """Audio chunks of text read from ``deltas``, segment after segment.

    Iterating gives the ``Audio`` chunks, each with the index of its
    ``segment``; ``events()`` gives them between ``SegmentStarted`` and
    ``SegmentEnded`` markers; ``captions`` holds each segment read to its end
    with where its audio lies (samples at ``sample_rate``). Work starts on
    the first read. Errors (of the deltas, or of a segment's synthesis) are
    raised in order, after the audio of the segments before them.
    ``close()`` cancels the segment being spoken and the ones queued.
    """

    def __init__(
        self,
        deltas: Iterable[str],
        segmenter: TextSegmenter,
        speak: Callable[[str], Any],
        sample_rate: int,
    ):
        self._pipeline = _Pipeline(deltas, segmenter, speak)
        self.ignored: tuple[str, ...] = ()  # request fields the model did not use
        self.sample_rate = sample_rate
        self._timeline = Timeline(sample_rate)
        self._events = self._read_events()

    @property
    def captions(self) -> list[Caption]:
        """The segments read to their end so far: all of them once the
        stream is finished."""
        return list(self._timeline.captions)

    def _read_events(self) -> Iterator[Any]:
        if self._pipeline.closed:
            return
        self._pipeline.start()
        while True:
            event = self._pipeline.output.get()
            if event is _END or self._pipeline.closed:
                return
            if isinstance(event, _Failure):
                self._pipeline.close()
                raise event.error
            if isinstance(event, SegmentEnded):
                self._pipeline.segment_read()
            self._timeline.add(event)
            yield event

    def close(self) -> None:
        """Safe from any thread; a read blocked in another thread returns."""
        self._pipeline.close()

    cancel = close  # as a ``ChunkStream`` names it

    def __del__(self) -> None:
        self._pipeline.close()


class AsyncTextStream:
    """A ``TextStream`` read from asyncio, its deltas from an async iterable."""

    def __init__(self, deltas: AsyncIterable[str], feed: TextFeed, stream: TextStream):
        self._deltas = deltas
        self._feed = feed
        self._stream = stream
        self._pump: asyncio.Task | None = None

    def __aiter__(self) -> AsyncTextStream:
        return self

    async def __anext__(self) -> Audio:
        if self._pump is None:
            self._pump = asyncio.ensure_future(self._feed_deltas())
        chunk = await asyncio.to_thread(next, self._stream, None)
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def _feed_deltas(self) -> None:
        failure = None
        try:
            async for delta in self._deltas:
                self._feed.put(delta)
        except Exception as error:  # noqa: BLE001 - the caller's iterable failed
            failure = error
        finally:
            self._feed.end(failure)

    async def aclose(self) -> None:
        self._stream.close()
        if self._pump is not None:
            self._pump.cancel()


class _Pipeline:
    """The threads' shared state; it holds no reference to its ``TextStream``,
    so dropping that stream closes the pipeline."""

    def __init__(self, deltas, segmenter, speak):
        self._deltas = deltas
        self._segmenter = segmenter
        self._speak = speak
        self._segments: queue.Queue = queue.Queue(SEGMENTS_QUEUED)
        self.output: queue.Queue = queue.Queue()
        self._ahead = threading.Semaphore(SEGMENTS_AHEAD)
        self._lock = threading.Lock()
        self._closed = False
        self._started = False
        self._speaking: Any = None

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        for work, name in ((self._read, "text-reader"), (self._speak_all, "text-speaker")):
            threading.Thread(target=work, name=f"mlx-speech-{name}", daemon=True).start()

    def _read(self) -> None:
        try:
            for delta in self._deltas:
                if self._closed:
                    return
                if delta is _COMMIT:
                    if not self._queued([*self._segmenter.commit(), _COMMIT]):
                        return
                    continue
                if not isinstance(delta, str):
                    raise TypeError(f"text deltas must be str, got {type(delta).__name__}")
                if not self._queued(self._segmenter.feed(delta)):
                    return
            if self._queued(self._segmenter.finish()):
                self._segments.put(_END)
        except Exception as error:  # noqa: BLE001 - the caller's iterator failed: tell the reader
            self._segments.put(_Failure(error))

    def _queued(self, segments) -> bool:
        """Queues ``segments``, each waiting while ``SEGMENTS_QUEUED`` wait
        (``close`` empties the queue); False once closed."""
        for segment in segments:
            self._segments.put(segment)
            if self._closed:
                return False
        return not self._closed

    def _speak_all(self) -> None:
        index = 0
        committed = False
        while True:
            segment = self._segments.get()
            if segment is _END and index == 0 and not committed and not self._closed:
                segment = _Failure(ValueError(EMPTY_TEXT))  # as for any empty text
            if segment is _COMMIT:
                committed = True  # a commit of nothing is answered, not refused
                self.output.put(segment)  # after the audio of the segments before
                continue
            if not isinstance(segment, str):
                self.output.put(segment)  # the end, or the deltas' failure
                return
            self._ahead.acquire()
            if not self._speak_one(index, segment):
                return
            index += 1

    def _speak_one(self, index: int, text: str) -> bool:
        """Put one segment's audio in the output; False once the work ends."""
        with self._lock:
            if self._closed:
                return False
            try:
                self._speaking = self._speak(text)
            except Exception as error:  # noqa: BLE001 - e.g. a segment's text is refused
                self.output.put(_Failure(error))
                return False
        shown = shown_text(text)
        self.output.put(SegmentStarted(index, shown))
        try:
            for event in events_of(self._speaking):
                if isinstance(event, Audio):
                    event = dataclasses.replace(event, segment=index)
                self.output.put(event)  # the audio, and the seams of its pauses
        except Exception as error:  # noqa: BLE001 - synthesis failed: tell the reader
            self.output.put(_Failure(error))
            return False
        if self._closed:
            return False
        self.output.put(SegmentEnded(index, shown))
        return True

    @property
    def closed(self) -> bool:
        return self._closed

    def segment_read(self) -> None:
        self._ahead.release()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._speaking is not None:
                self._speaking.cancel()
        self._ahead.release()  # a speaker waiting to run ahead wakes and sees the close
        self._drop_segments()  # a reader waiting for room wakes and sees the close
        try:
            self._segments.put_nowait(_END)  # a speaker waiting for text wakes and ends
        except queue.Full:  # the reader queued one more meanwhile: the speaker wakes
            pass
        self.output.put(_END)  # a caller waiting for audio wakes and ends

    def _drop_segments(self) -> None:
        while True:
            try:
                self._segments.get_nowait()
            except queue.Empty:
                return
