"""Prometheus text exposition of the server's counters, gauges and histograms."""

from __future__ import annotations

import threading
from collections import Counter

TTFA_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
RTF_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32)
STEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.total += 1
        self.sum += value
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1

    def lines(self, name: str) -> list[str]:
        out = [f"# TYPE {name} histogram"]
        out += [
            f'{name}_bucket{{le="{bound:g}"}} {count}'
            for bound, count in zip(self.buckets, self.counts, strict=False)
        ]
        out += [
            f'{name}_bucket{{le="+Inf"}} {self.total}',
            f"{name}_sum {self.sum:.6f}",
            f"{name}_count {self.total}",
        ]
        return out


class Metrics:
    def __init__(self):
        self._lock = threading.Lock()
        self._responses: Counter[int] = Counter()
        self._ttfa = Histogram(TTFA_BUCKETS)
        self._rtf = Histogram(RTF_BUCKETS)
        self._batch = Histogram(BATCH_BUCKETS)
        self._step = Histogram(STEP_BUCKETS)
        self._in_flight = 0  # accepted speech requests not yet finished

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def request_opened(self) -> None:
        with self._lock:
            self._in_flight += 1

    def request_closed(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def response(self, status: int) -> None:
        with self._lock:
            self._responses[status] += 1

    def first_audio(self, seconds: float) -> None:
        with self._lock:
            self._ttfa.observe(seconds)

    def finished(self, generation_seconds: float, audio_seconds: float) -> None:
        if audio_seconds > 0:
            with self._lock:
                self._rtf.observe(generation_seconds / audio_seconds)

    def forward(self, jobs: int, seconds: float) -> None:
        """One shared model step (worker thread): how many jobs, how long."""
        with self._lock:
            self._batch.observe(jobs)
            self._step.observe(seconds)

    def render(self, holding: int, parked: int, counters: dict[str, int]) -> str:
        """``holding``: requests the engine holds (``parked`` of them waiting
        for their readers); the others in flight wait to start."""
        with self._lock:
            queue_depth = max(0, self._in_flight - holding)
            lines = ["# TYPE mlx_speech_requests_total counter"]
            lines += [
                f'mlx_speech_requests_total{{status="{status}"}} {count}'
                for status, count in sorted(self._responses.items())
            ]
            lines += [
                "# TYPE mlx_speech_queue_depth gauge",
                f"mlx_speech_queue_depth {queue_depth}",
                "# TYPE mlx_speech_active_streams gauge",
                f"mlx_speech_active_streams {self._in_flight - queue_depth}",
                "# TYPE mlx_speech_parked_streams gauge",
                f"mlx_speech_parked_streams {parked}",
            ]
            for name, value in sorted(counters.items()):
                lines += [
                    f"# TYPE mlx_speech_{name}_total counter",
                    f"mlx_speech_{name}_total {value}",
                ]
            lines += self._ttfa.lines("mlx_speech_time_to_first_audio_seconds")
            lines += self._rtf.lines("mlx_speech_real_time_factor")
            lines += self._batch.lines("mlx_speech_batch_size")
            lines += self._step.lines("mlx_speech_batch_step_seconds")
        return "\n".join(lines) + "\n"
