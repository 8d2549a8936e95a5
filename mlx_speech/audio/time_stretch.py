"""Speaking faster or slower without changing pitch: WSOLA, chunk by chunk.

Waveform-similarity overlap-add: the output is built from Hann-windowed
frames of the input, one every half frame. Frame ``k`` is taken near input
position ``k * hop * speed``, shifted by up to a quarter frame to where the
input looks most like the natural continuation of the frame before, so
periods line up and the voice keeps its pitch and timbre.

It runs on chunks as they arrive: a frame is computed as soon as the input
it needs is there, and every frame is computed from the same input samples
whatever the chunking, so a streamed result equals the buffered one sample
for sample. The output lags the input by at most one frame and its search
range (25 ms + 6 ms at any rate), within the first chunk.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import InvalidRequest, finite_number, shown
from .samples import Audio

MIN_SPEED, MAX_SPEED = 0.25, 4.0
FRAME_SECONDS = 0.025


def check_speed(speed: object) -> float:
    """``speed`` as a float in MIN_SPEED..MAX_SPEED (``None`` is 1.0)."""
    if speed is None:
        return 1.0
    value = finite_number("speed", speed)
    if not MIN_SPEED <= value <= MAX_SPEED:
        raise InvalidRequest(
            "speed", f"speed must be in {MIN_SPEED}..{MAX_SPEED}, got {shown(speed)}"
        )
    return value


class TimeStretch:
    """``process`` each chunk ([samples] or [samples, channels] float32) in
    order, then ``flush``; together they return the input at ``speed`` times
    its pace, ``round(len(input) / speed)`` samples long."""

    def __init__(self, speed: float, sample_rate: int):
        self.speed = speed
        self._hop = max(16, round(sample_rate * FRAME_SECONDS / 2))  # output hop
        self._frame = 2 * self._hop
        self._tolerance = self._hop // 2
        window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(self._frame) / self._frame)
        self._window = window.astype(np.float32)  # two of them overlap to exactly 1
        self._first_window = self._window.copy()
        self._first_window[: self._hop] = 1.0  # no fade-in at the start
        self._fft_size = 1 << (self._frame + 2 * self._tolerance - 1).bit_length()
        self._input: np.ndarray | None = None  # kept input, from _input_start on
        self._input_start = 0
        self._received = 0
        self._emitted = 0
        self._frames = 0  # frames added so far
        self._previous = 0  # input position of the last frame
        self._pending: np.ndarray | None = None  # output not yet complete

    def process(self, samples: np.ndarray) -> np.ndarray:
        samples = np.asarray(samples, dtype=np.float32)
        if self._input is None:
            self._input = samples[:0]
            self._pending = np.zeros((self._frame, *samples.shape[1:]), np.float32)
        self._input = np.concatenate([self._input, samples])
        self._received += len(samples)
        return self._run(self._received)

    def flush(self) -> np.ndarray:
        """The rest of the output; the input is taken as silent after its end."""
        if self._input is None:
            return np.zeros(0, np.float32)
        target = round(self._received / self.speed)
        padding = self._frame + 2 * self._tolerance + math.ceil(self._hop * self.speed)
        tail = []
        while self._emitted < target:
            silence = np.zeros((padding, *self._input.shape[1:]), np.float32)
            self._input = np.concatenate([self._input, silence])
            tail.append(self._run(self._input_start + len(self._input)))
        out = np.concatenate(tail) if tail else self._pending[:0]
        return out[: len(out) - (self._emitted - target)]

    def _run(self, available: int) -> np.ndarray:
        """Add every frame whose input is within ``available`` samples; the
        completed output."""
        done = []
        while True:
            nominal = round(self._frames * self._hop * self.speed)
            # the first frame is taken at 0; a later one reads the template
            # after the previous frame and the candidates around ``nominal``
            reach = max(nominal + self._tolerance, self._previous + self._hop)
            if (reach if self._frames else 0) + self._frame > available:
                break
            position = self._best_position(nominal) if self._frames else 0
            frame = self._slice(position)
            window = self._window if self._frames else self._first_window
            self._pending += frame * window.reshape(-1, *[1] * (frame.ndim - 1))
            done.append(self._pending[: self._hop].copy())
            self._pending = np.concatenate(
                [self._pending[self._hop :], np.zeros_like(self._pending[: self._hop])]
            )
            self._frames += 1
            self._previous = position
            self._forget(round(self._frames * self._hop * self.speed) - self._tolerance)
        self._emitted += sum(len(part) for part in done)
        return np.concatenate(done) if done else self._pending[:0]

    def _slice(self, start: int, length: int | None = None) -> np.ndarray:
        offset = start - self._input_start
        return self._input[offset : offset + (length or self._frame)]

    def _best_position(self, nominal: int) -> int:
        """The input position within the tolerance of ``nominal`` where the
        input best continues the previous frame (cross-correlation by FFT)."""
        lowest = max(nominal - self._tolerance, self._input_start)
        span = nominal + self._tolerance - lowest
        template = self._mono(self._slice(self._previous + self._hop))
        candidates = self._mono(self._slice(lowest, self._frame + span))
        spectrum = np.fft.rfft(candidates, self._fft_size) * np.conj(
            np.fft.rfft(template, self._fft_size)
        )
        scores = np.fft.irfft(spectrum, self._fft_size)[: span + 1]
        return lowest + int(np.argmax(scores))

    @staticmethod
    def _mono(samples: np.ndarray) -> np.ndarray:
        return samples if samples.ndim == 1 else samples.mean(axis=1)

    def _forget(self, keep_from: int) -> None:
        """Drop input no later frame or template can read."""
        keep_from = min(keep_from, self._previous + self._hop)
        drop = keep_from - self._input_start
        if drop > 0:
            self._input = self._input[drop:]
            self._input_start = keep_from


class StretchedStream:
    """A chunk stream (``engine.ChunkStream``) at ``speed`` times its pace,
    with the same reading interface; stretched on the reader's thread."""

    def __init__(self, chunks: Any, speed: float, sample_rate: int):
        self._chunks = chunks
        self._stretch = TimeStretch(speed, sample_rate)
        self._sample_rate = sample_rate
        self._ended = False
        self.ignored = chunks.ignored

    def __iter__(self) -> StretchedStream:
        return self

    def __next__(self) -> Audio:
        return self.get()

    def get(self, timeout: float | None = None) -> Audio:
        while not self._ended:
            try:
                chunk = self._chunks.get(timeout)
            except StopIteration:
                self._ended = True
                samples = self._stretch.flush()
            else:
                samples = self._stretch.process(chunk.samples)
            if len(samples):
                return Audio(samples, self._sample_rate)
        raise StopIteration

    @property
    def result(self) -> Any:
        return self._chunks.result

    def cancel(self) -> None:
        self._ended = True
        self._chunks.cancel()

    close = cancel
