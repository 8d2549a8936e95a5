"""One utterance of a session: its text as it comes, its stream, and the
answers its commits are owed."""

from __future__ import annotations

import anyio

from ...text.stream import TextFeed, TextStream


class Utterance:
    """The text of one ``input.done``, and the task speaking it."""

    def __init__(self, index: int, stream: TextStream | None, feed: TextFeed | None):
        self.index = index
        self.stream = stream  # None: refused (the session or the server was full)
        self.feed = feed
        self.admitted = False  # counted toward --max-queue: its turn came
        self.chars = 0
        self.sentences = 0  # segments sent, once its speaking has ended
        self.commits = 0  # input.commit messages taken
        self.commit_ids: list = []  # each commit's commit_id, as the client sent it
        self.answered = 0  # of them, answered with input.committed
        self._sentences_committed = 0
        self.flushed = anyio.Event()
        self.spoken = anyio.Event()  # its last audio.done was sent
        self.done = anyio.Event()

    def cancel(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.feed.end()

    def commit_answer(self, sentences: int) -> dict:
        """``input.committed`` for the next commit, ``sentences`` segments
        having been sent by then."""
        spoken = sentences - self._sentences_committed
        answer = {
            "type": "input.committed",
            "utterance_index": self.index,
            "segment_index": self.answered,
            "segment_sentences": spoken,
            "total_sentences": sentences,
            # vLLM-Omni's client reads these two: its own id, and the commit's
            # first segment's sentence_index (none where it spoke none)
            "commit_id": self.commit_ids[self.answered],
            "sentence_index": self._sentences_committed if spoken else None,
        }
        self.answered += 1
        self._sentences_committed = sentences
        return answer
