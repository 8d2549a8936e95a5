"""Small pieces with rules worth pinning down: chunk growth and the BLAS switch."""

from __future__ import annotations

import pytest

from mlx_speech import blas
from mlx_speech.families import chunk_schedule
from mlx_speech.families.chunk_schedule import ChunkSchedule


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(chunk_schedule.time, "perf_counter", fake)
    return fake


def _deliver(schedule: ChunkSchedule, clock: Clock, frames: int, seconds_per_frame: float):
    for _ in range(frames):
        clock.now += seconds_per_frame
        schedule.frame_done()
    schedule.chunk_done(frames)


def test_first_chunk_is_one_frame_then_chunks_double_up_to_the_cap(clock):
    schedule = ChunkSchedule(frame_seconds=0.08, max_frames=16)
    assert schedule.frames_for_next_chunk() == 1
    sizes = []
    for _ in range(7):  # generating 4x faster than real time: the lead keeps growing
        size = schedule.frames_for_next_chunk()
        sizes.append(size)
        _deliver(schedule, clock, size, 0.02)
    assert sizes == [1, 2, 4, 8, 16, 16, 16]


def test_growth_stops_where_the_lead_would_not_cover_the_next_chunk(clock):
    schedule = ChunkSchedule(frame_seconds=0.08, max_frames=16)
    _deliver(schedule, clock, 1, 0.07)  # barely faster than real time
    _deliver(schedule, clock, 2, 0.07)
    # 0.24 s delivered, 0.14 s played: lead 0.10 s covers 0 frames at 2 x 0.07 s each
    assert schedule.frames_for_next_chunk() == 4  # behind the safe margin: throughput first
    schedule = ChunkSchedule(frame_seconds=0.08, max_frames=16)
    _deliver(schedule, clock, 1, 0.01)
    _deliver(schedule, clock, 2, 0.01)
    _deliver(schedule, clock, 4, 0.01)
    # lead = 0.56 - 0.06 = 0.50 s; each frame takes 0.01 s: 25 affordable, doubling gives 8
    assert schedule.frames_for_next_chunk() == 8


def test_fast_blas_re_executes_at_most_once(monkeypatch, tmp_path):
    library = tmp_path / "libopenblas.so.0"
    library.write_bytes(b"")
    calls = []
    monkeypatch.setattr(blas, "OPENBLAS_LIBRARIES", (str(library),))
    monkeypatch.setattr(blas.sys, "platform", "linux")
    monkeypatch.setattr(blas.os, "execv", lambda *args: calls.append(args))
    monkeypatch.setenv("MLX_SPEECH_BLAS_CHECKED", "")  # restored after the test
    monkeypatch.delenv("MLX_SPEECH_BLAS_CHECKED")
    monkeypatch.setenv("LD_PRELOAD", "")
    blas.use_fast_blas()
    blas.use_fast_blas()
    assert len(calls) == 1
    assert blas.os.environ["LD_PRELOAD"] == str(library)


def test_fast_blas_leaves_a_process_alone_when_openblas_is_missing(monkeypatch):
    calls = []
    monkeypatch.setattr(blas, "OPENBLAS_LIBRARIES", ("/nonexistent/libopenblas.so.0",))
    monkeypatch.setattr(blas.sys, "platform", "linux")
    monkeypatch.setattr(blas.os, "execv", lambda *args: calls.append(args))
    monkeypatch.setenv("MLX_SPEECH_BLAS_CHECKED", "")  # restored after the test
    monkeypatch.delenv("MLX_SPEECH_BLAS_CHECKED")
    blas.use_fast_blas()
    assert calls == []


def test_rows_drawn_together_equal_mlx_categorical_row_by_row():
    """The batched draw is MLX's own categorical, row by row, key by key."""
    import mlx.core as mx
    from mlx_audio.tts.models.moss_tts_nano.sampling import apply_top_k, apply_top_p

    from mlx_speech.families.moss_nano.sampling import categorical_rows

    for trial in range(40):
        logits = mx.random.normal((8, 256), key=mx.random.key(trial)) * (1 + trial % 4)
        scores = apply_top_p(apply_top_k(logits / 0.8, 25), 0.95)
        if trial % 10 == 0:  # an infinite maximum: a one-hot draw
            scores = scores.at[3, mx.argmax(scores[3]).item()].add(float("inf"))
        keys = [mx.random.key(1000 * trial + row) for row in range(8)]
        alone = [
            mx.random.categorical(scores[row : row + 1], axis=-1, key=keys[row]).item()
            for row in range(8)
        ]
        assert categorical_rows(scores, keys).tolist() == alone
