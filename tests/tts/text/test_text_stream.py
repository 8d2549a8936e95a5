"""``TTS.stream_text`` / ``astream_text``: speaking text while it is written."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from mlx_speech.text.stream import SEGMENTS_AHEAD, SegmentEnded, SegmentStarted
from tests.tts.support.clip_decodes import counted_decodes
from tests.tts.support.idle import wait_until_idle

FIRST = "Dr. Smith paid 3.5 dollars. "
SECOND = "Then he went home!"
OPTIONS = {"seed": 4, "max_new_tokens": 12}


def characters(text: str):
    yield from text  # one-character deltas, the smallest a chat model sends


def samples_of(chunks) -> np.ndarray:
    return np.concatenate([chunk.samples for chunk in chunks])


def test_each_sentence_sounds_as_it_would_alone(speaking_tts):
    spoken = samples_of(speaking_tts.stream_text(characters(FIRST + SECOND), **OPTIONS))
    alone = [speaking_tts.speak(t.strip(), **OPTIONS).samples for t in (FIRST, SECOND)]
    np.testing.assert_array_equal(spoken, np.concatenate(alone))


def test_events_mark_each_segment_with_its_text(speaking_tts):
    stream = speaking_tts.stream_text(characters(FIRST + SECOND), **OPTIONS)
    markers = [e for e in stream.events() if isinstance(e, SegmentStarted | SegmentEnded)]
    assert markers == [
        SegmentStarted(0, FIRST.strip()),
        SegmentEnded(0, FIRST.strip()),
        SegmentStarted(1, SECOND),
        SegmentEnded(1, SECOND),
    ]


def test_a_producer_that_waits_for_audio_does_not_deadlock(speaking_tts):
    heard = threading.Event()
    waited = []

    def producer():
        yield from characters(FIRST)
        waited.append(heard.wait(timeout=120))  # only continues once audio arrived
        yield SECOND

    chunks = []
    for chunk in speaking_tts.stream_text(producer(), **OPTIONS):
        chunks.append(chunk)
        heard.set()
    assert waited == [True]
    expected = [speaking_tts.speak(t.strip(), **OPTIONS).samples for t in (FIRST, SECOND)]
    np.testing.assert_array_equal(samples_of(chunks), np.concatenate(expected))


def test_clauses_and_whole_text_splits(speaking_tts):
    text = "Well, that is all."

    def started(split):
        stream = speaking_tts.stream_text([text], split=split, **OPTIONS)
        return [e.text for e in stream.events() if isinstance(e, SegmentStarted)]

    assert started("clause") == ["Well,", "that is all."]
    assert started("none") == [text]


def test_closing_cancels_the_running_and_queued_segments(speaking_tts):
    long = {"temperature": 0, "max_new_tokens": 4000}
    text = ["One sentence. ", "Another one. ", "A third."]
    stream = speaking_tts.stream_text(text, **long)
    next(stream)
    stream.close()
    wait_until_idle()
    assert list(stream) == []


def test_one_voice_for_every_segment_and_one_reference_encode(speaking_tts, reference_clip):
    voice = str(reference_clip)
    text = "First part here. Second part here. Third part here."
    before = speaking_tts.stats()["reference_encodes"]
    spoken = samples_of(speaking_tts.stream_text(characters(text), voice=voice, **OPTIONS))
    assert speaking_tts.stats()["reference_encodes"] - before <= 1
    alone = [
        speaking_tts.speak(part + ".", voice=voice, **OPTIONS).samples
        for part in ("First part here", "Second part here", "Third part here")
    ]
    np.testing.assert_array_equal(spoken, np.concatenate(alone))


@pytest.mark.parametrize(
    "options",
    [{"split": "word"}, {"temperature": -1}, {"voice": "nobody-by-this-name"}],
)
def test_bad_options_fail_the_call_not_a_segment(speaking_tts, options):
    with pytest.raises(ValueError):
        speaking_tts.stream_text(["Hello."], **options)


def test_a_failing_producer_fails_after_the_audio_before_it(speaking_tts):
    def producer():
        yield FIRST
        yield "And the rest "
        raise RuntimeError("the chat model went away")

    chunks = []
    with pytest.raises(RuntimeError, match="went away"):
        for chunk in speaking_tts.stream_text(producer(), **OPTIONS):
            chunks.append(chunk)
    np.testing.assert_array_equal(
        samples_of(chunks), speaking_tts.speak(FIRST.strip(), **OPTIONS).samples
    )


def test_a_delta_that_is_not_text_is_a_type_error(speaking_tts):
    with pytest.raises(TypeError, match="must be str"):
        list(speaking_tts.stream_text(["Hello. ", 7], **OPTIONS))


def test_async_deltas_sound_like_the_sync_ones(speaking_tts):
    async def deltas():
        for piece in characters(FIRST + SECOND):
            await asyncio.sleep(0)
            yield piece

    async def main():
        return [chunk async for chunk in speaking_tts.astream_text(deltas(), **OPTIONS)]

    spoken = samples_of(asyncio.run(main()))
    sync = samples_of(speaking_tts.stream_text([FIRST + SECOND], **OPTIONS))
    np.testing.assert_array_equal(spoken, sync)


def test_async_close_cancels(speaking_tts):
    async def endless():
        while True:
            yield "More text to say. "
            await asyncio.sleep(0.01)

    async def main():
        stream = speaking_tts.astream_text(endless(), temperature=0, max_new_tokens=4000)
        await stream.__anext__()
        await stream.aclose()

    asyncio.run(main())
    wait_until_idle()


def test_a_clip_is_decoded_once_for_all_segments(speaking_tts, reference_clip, monkeypatch):
    """Decoding a clip (a 30 s, 8-channel, 384 kHz one takes seconds) is not
    repeated for every sentence: ten sentences took ten decodes."""
    decodes = counted_decodes(monkeypatch)
    text = " ".join(f"Sentence number {count}." for count in range(10))
    voice = str(reference_clip)
    chunks = list(speaking_tts.stream_text(iter([text]), voice=voice, max_new_tokens=2))
    assert len(chunks) >= 10  # every sentence spoke
    assert len(decodes) == 1


def test_text_faster_than_speech_is_held_back_not_buffered(speaking_tts):
    """A producer that never waits and a reader that stops after one chunk:
    the text read stops at ``SEGMENTS_QUEUED`` segments not yet spoken (it
    grew to millions of segments), and closing frees them."""
    from mlx_speech.text.stream import SEGMENTS_QUEUED

    produced = []

    def endless():
        while True:
            produced.append(None)
            yield f"Sentence number {len(produced)}. "

    stream = speaking_tts.stream_text(endless(), max_new_tokens=1)
    next(stream)
    time.sleep(1.0)
    held = len(produced)
    time.sleep(0.5)
    assert len(produced) == held <= SEGMENTS_QUEUED + 2 * SEGMENTS_AHEAD + 2
    pipeline = stream._pipeline
    stream.close()
    assert pipeline._segments.qsize() <= 2  # the end marker, one more at most
    wait_until_idle()


def test_a_text_stream_of_no_words_is_an_error(speaking_tts):
    for deltas in ([], ["", "  ", "\n"]):
        with pytest.raises(ValueError, match="the text was empty: nothing to speak"):
            list(speaking_tts.stream_text(deltas))
