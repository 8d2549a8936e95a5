"""A model held part-way through an utterance until its reader has had
audio: that the first audio reached the reader while the rest was still to
be made is then a fact of order, not of timing."""

from __future__ import annotations

import threading

HELD_AT_STEP = 10  # the first chunk is one frame: it was made well before
MOST_HELD_SECONDS = 30  # never forever, should the audio not come


class HeldGeneration:
    def __init__(self, service, monkeypatch):
        self.released = threading.Event()  # set by the reader on its first audio
        self.released_in_time: list[bool] = []  # per utterance held
        real = service.synthesize

        def held(request):
            for index, step in enumerate(real(request)):
                yield step
                if index + 1 == HELD_AT_STEP:
                    self.released_in_time.append(self.released.wait(MOST_HELD_SECONDS))

        monkeypatch.setattr(service, "synthesize", held)
