"""vLLM-Omni's ``input.commit`` on ``/v1/audio/speech/stream``: a sentence
committed is spoken at once, without ``input.done``, and answered with
``input.committed``; a real server and the ``websockets`` client."""

from __future__ import annotations

import httpx
import pytest
from websockets.sync.client import connect

from mlx_speech.server import ServerSettings
from tests.tts.http.test_speech_socket import messages, receive_until, send, socket_url
from tests.tts.support.server import RunningServer

pytestmark = pytest.mark.slow  # real servers

SHORT = {"seed": 3, "max_new_tokens": 4}
PCM = {"response_format": "pcm", "stream_audio": True, **SHORT}


@pytest.fixture(scope="module")
def server(speaking_dir, nano_backend, tmp_path_factory):
    settings = ServerSettings(
        model=str(speaking_dir),
        voices_dir=tmp_path_factory.mktemp("commit-voices"),
        backend=nano_backend,
    )
    with RunningServer(settings) as running:
        yield running


def _http_pcm(server, text: str) -> bytes:
    body = {"input": text, "response_format": "pcm", "sample_rate": 48000, **SHORT}
    return httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60).content


def _audio(received) -> bytes:
    return b"".join(frame for frame in received if isinstance(frame, bytes))


def test_a_commit_speaks_its_sentence_before_input_done(server):
    """The sentence-commit client's pattern: the default split ("none")
    holds text until input.done, but each commit is spoken at once."""
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", sample_rate=48000, **PCM)
        send(ws, "input.text", text="Hello ")
        send(ws, "input.text", text="there")
        send(ws, "input.commit", commit_id="c-1")
        first = receive_until(ws, "input.committed")
        send(ws, "input.text", text="How are you")
        send(ws, "input.commit", commit_id=2)
        second = receive_until(ws, "input.committed")
        send(ws, "input.done")
        done = receive_until(ws, "session.done")
    assert messages(first, "audio.start")[0]["sentence_text"] == "Hello there"
    assert first[-1] == {
        "type": "input.committed",
        "utterance_index": 0,
        "segment_index": 0,
        "segment_sentences": 1,
        "total_sentences": 1,
        "commit_id": "c-1",  # echoed, as vLLM-Omni's client prints it
        "sentence_index": 0,
    }
    assert messages(second, "audio.start")[0]["sentence_index"] == 1
    assert second[-1]["segment_index"] == 1 and second[-1]["segment_sentences"] == 1
    assert (second[-1]["commit_id"], second[-1]["sentence_index"]) == (2, 1)
    assert done == [{"type": "session.done", "utterance_index": 0, "total_sentences": 2}]
    # each commit is its text spoken alone, as a sentence is
    assert _audio(first) == _http_pcm(server, "Hello there")
    assert _audio(second) == _http_pcm(server, "How are you")
    assert _audio(first) != _http_pcm(server, "How are you")


def test_a_commit_cuts_its_unfinished_sentence_and_the_split_goes_on(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", split_granularity="sentence", **PCM)
        send(ws, "input.text", text="One. Two")
        send(ws, "input.commit")
        committed = receive_until(ws, "input.committed")
        send(ws, "input.text", text="Three. Four")
        send(ws, "input.done")
        rest = receive_until(ws, "session.done")
    texts = [m["sentence_text"] for m in messages(committed, "audio.start")]
    assert texts == ["One.", "Two"]
    assert committed[-1]["segment_sentences"] == 2
    assert [m["sentence_text"] for m in messages(rest, "audio.start")] == ["Three.", "Four"]
    assert rest[-1]["total_sentences"] == 4


def test_a_commit_of_nothing_is_answered_and_says_nothing(server):
    with connect(socket_url(server)) as ws:
        send(ws, "session.config", **PCM)
        send(ws, "input.commit")
        answered = receive_until(ws, "input.committed")
        send(ws, "input.commit")
        again = receive_until(ws, "input.committed")
        send(ws, "input.done")
        done = receive_until(ws, "session.done")
    assert answered == [
        {
            "type": "input.committed",
            "utterance_index": 0,
            "segment_index": 0,
            "segment_sentences": 0,
            "total_sentences": 0,
            "commit_id": None,
            "sentence_index": None,
        }
    ]
    assert again[-1]["segment_index"] == 1
    assert done == [{"type": "session.done", "utterance_index": 0, "total_sentences": 0}]


def test_a_refused_utterances_commit_is_answered_at_once(speaking_dir, tmp_path):
    settings = ServerSettings(
        model=str(speaking_dir), voices_dir=tmp_path, max_queue=-(10**6)
    )
    with RunningServer(settings) as running, connect(socket_url(running)) as ws:
        send(ws, "session.config", **PCM)
        send(ws, "input.text", text="Hello.")
        send(ws, "input.commit")
        received = receive_until(ws, "input.committed")
        send(ws, "input.done")
        done = receive_until(ws, "session.done")
    assert "this utterance is dropped" in messages(received, "error")[0]["message"]
    assert received[-1]["segment_sentences"] == 0
    assert done[-1]["total_sentences"] == 0
