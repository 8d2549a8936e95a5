"""Small pieces with rules worth pinning down: chunk growth and the BLAS switch."""

from __future__ import annotations

import pytest

from mlx_speech.families.chunk_schedule import ChunkSchedule
from mlx_speech.host_engine import blas


def test_first_chunk_is_one_frame_then_chunks_grow_by_half_up_to_the_cap():
    schedule = ChunkSchedule(max_frames=16)
    sizes = []
    for _ in range(12):
        size = schedule.frames_for_next_chunk()
        sizes.append(size)
        schedule.chunk_done(size)
    assert sizes == [1, 1, 1, 1, 2, 3, 4, 6, 9, 14, 16, 16]
    # every chunk is at most half the frames before it (after the first four)
    assert all(size <= max(1, sum(sizes[:i]) // 2) for i, size in enumerate(sizes))


@pytest.fixture
def fresh_linux(monkeypatch, tmp_path) -> list:
    """A Linux process with an OpenBLAS file, none loaded and MLX not yet
    imported; the list of the loads ``bring_openblas`` asks for (none happens)."""
    library = tmp_path / "libopenblas.so.0"
    library.write_bytes(b"")
    loads = []
    monkeypatch.setattr(blas, "OPENBLAS_LIBRARIES", (str(library),))
    monkeypatch.setattr(blas.sys, "platform", "linux")
    monkeypatch.setattr(blas, "loaded_openblas", lambda: None)
    monkeypatch.setattr(blas, "_not_brought", None)
    monkeypatch.delitem(blas.sys.modules, "mlx.core", raising=False)
    monkeypatch.setattr(
        blas.ctypes, "CDLL", lambda path, mode=0: loads.append((path, mode))
    )
    monkeypatch.setattr(blas, "kernels_in_a_child", lambda library: "Prescott")
    monkeypatch.setattr(blas, "_cpu_flags", lambda: AVX512)
    for name in ("OPENBLAS_THREAD_TIMEOUT", "OPENBLAS_CORETYPE"):
        monkeypatch.setenv(name, "")  # restored after the test
        monkeypatch.delenv(name)
    return loads


@pytest.mark.parametrize("set_by_user", [None, "28"])
def test_openblas_is_loaded_global_with_its_spin_bounded(
    monkeypatch, fresh_linux, set_by_user
):
    if set_by_user:
        monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", set_by_user)
    blas.bring_openblas()
    assert fresh_linux == [(blas.OPENBLAS_LIBRARIES[0], blas.ctypes.RTLD_GLOBAL)]
    assert blas.os.environ["OPENBLAS_THREAD_TIMEOUT"] == (set_by_user or "20")


@pytest.mark.parametrize("set_by_user", [None, "Haswell"])
def test_openblas_is_asked_for_the_kernels_it_does_not_pick(
    monkeypatch, fresh_linux, set_by_user
):
    if set_by_user:
        monkeypatch.setenv("OPENBLAS_CORETYPE", set_by_user)
    blas.bring_openblas()
    assert blas.os.environ["OPENBLAS_CORETYPE"] == (set_by_user or "SkylakeX")


def test_openblas_is_not_loaded_once_mlx_is_and_the_warning_says_why(
    monkeypatch, fresh_linux
):
    monkeypatch.setitem(blas.sys.modules, "mlx.core", object())
    blas.bring_openblas()
    assert fresh_linux == []
    assert "import mlx_speech before mlx" in blas.reference_blas_warning()


def test_a_missing_openblas_is_said_with_what_to_install(monkeypatch, fresh_linux):
    monkeypatch.setattr(blas, "OPENBLAS_LIBRARIES", ("/nonexistent/libopenblas.so.0",))
    blas.bring_openblas()
    assert fresh_linux == []
    assert "install libopenblas0-pthread" in blas.reference_blas_warning()


AVX512 = frozenset({"sse3", "avx2", "fma", "avx512f", "avx512cd", "avx512bw"})
AVX512 |= {"avx512dq", "avx512vl"}


@pytest.mark.parametrize(
    "chosen, flags, asked",
    [
        ("Prescott", AVX512, "SkylakeX"),  # OpenBLAS 0.3.21 on a 2023 Xeon
        ("Nehalem", frozenset({"sse4_2", "avx2", "fma"}), "Haswell"),
        ("Prescott", frozenset({"sse3", "avx"}), None),  # it is that old
        ("Prescott", AVX512 - {"avx512vl", "avx2"}, None),
        ("SkylakeX", AVX512, None),
        ("Cooperlake", AVX512, None),
        ("Zen", AVX512, None),
        (None, AVX512, None),  # OpenBLAS could not be asked
    ],
)
def test_openblas_is_asked_for_newer_kernels_only_where_it_fell_back(chosen, flags, asked):
    assert blas.better_kernels(chosen, flags) == asked


def test_rows_drawn_together_equal_mlx_categorical_row_by_row():
    """The batched draw is MLX's own categorical, row by row, key by key."""
    import mlx.core as mx
    from mlx_audio.tts.models.moss_tts_nano.sampling import apply_top_k, apply_top_p

    from mlx_speech.families.moss_nano.sampling import inverse_cdf

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
        uniform = mx.concatenate([mx.random.uniform(shape=(1, 1), key=k) for k in keys])
        assert inverse_cdf(scores, uniform).tolist() == alone


def test_the_compiled_filters_and_draw_equal_mlx_audio_and_mlx_categorical():
    """Temperature, top-k and top-p compiled together (the values entering as
    arrays) give mlx-audio's filtered scores and MLX's categorical draw, for
    the edge values too (no top-k, top-k past the vocabulary, top-p 1)."""
    import mlx.core as mx
    from mlx_audio.tts.models.moss_tts_nano.sampling import apply_top_k, apply_top_p

    from mlx_speech.families.moss_nano.sampling import HeadSampler, _filtered_draw

    cases = [
        (0.8, 25, 0.95),
        (1.0, 50, 1.0),
        (0.3, 0, 0.5),
        (1.7, 300, 0.9),
        (0.8, 1, 0.95),
    ]
    cases += [(0.1 + 0.37 * t, 3 + 7 * t, 0.55 + 0.04 * t) for t in range(10)]
    for trial, (temperature, top_k, top_p) in enumerate(cases):
        logits = mx.random.normal((6, 256), key=mx.random.key(trial)) * (1 + trial % 3)
        keys = [mx.random.key(500 * trial + row) for row in range(6)]
        scores = apply_top_p(apply_top_k(logits / temperature, top_k), top_p)
        expected = [
            mx.random.categorical(scores[row : row + 1], axis=-1, key=keys[row]).item()
            for row in range(6)
        ]
        uniform = mx.concatenate([mx.random.uniform(shape=(1, 1), key=k) for k in keys])
        sampler = HeadSampler(temperature, top_k, top_p)
        assert _filtered_draw(logits, uniform, sampler).tolist() == expected, sampler


def test_uniforms_drawn_together_equal_each_sequence_drawn_in_turn():
    """Every codebook's draw of every request, taken at once, are the draws
    each request's keys give one by one, and the sequences move on alike."""
    import mlx.core as mx

    from mlx_speech.families.moss_nano.sampling import KeySequence, draw_uniforms

    together = [KeySequence(seed) for seed in (0, 7, 123)]
    alone = [KeySequence(seed) for seed in (0, 7, 123)]
    uniforms = draw_uniforms(together, 16)
    for position, sequence in enumerate(alone):
        for count in range(16):
            expected = mx.random.uniform(shape=(1, 1), key=sequence.next())
            assert uniforms[count, position].item() == expected.item()
    for mine, theirs in zip(together, alone, strict=True):
        assert mine.next().tolist() == theirs.next().tolist()


def test_new_sampler_values_and_mixed_batches_reuse_the_compiled_draw(monkeypatch):
    """The compiled filters and draw trace once per top-k value (it sets
    shapes) and batch shape; a request's new temperature or top-p, and
    requests with other samplers in the same steps, trace nothing again."""
    import mlx.core as mx

    from mlx_speech.families.moss_nano import sampling
    from mlx_speech.families.moss_nano.sampling import HeadSampler, pick_rows

    traces = []
    drawn = sampling.inverse_cdf  # runs in Python only while MLX traces
    monkeypatch.setattr(sampling, "inverse_cdf", lambda *a: traces.append(1) or drawn(*a))
    vocab = 37  # a shape no other test compiles
    logits = mx.random.normal((2, vocab), key=mx.random.key(0))
    uniforms = mx.array([[0.25], [0.75]])

    def step(*samplers: HeadSampler) -> None:
        mx.eval(pick_rows(logits, list(samplers), uniforms, [0, 1]))

    step(HeadSampler(0.8, 5, 0.9), HeadSampler(0.8, 5, 0.9))
    assert len(traces) == 1
    step(HeadSampler(0.5, 5, 0.7), HeadSampler(0.5, 5, 0.7))  # other values
    assert len(traces) == 1
    for _ in range(3):  # two requests' samplers in each step, one row each
        step(HeadSampler(0.8, 5, 0.9), HeadSampler(1.1, 7, 0.6))
    assert len(traces) == 3  # one row with top-k 5, one with 7: traced once each


def test_numpys_own_openblas_is_not_taken_for_the_systems(monkeypatch):
    """numpy's bundled OpenBLAS (64-bit indices, suffixed symbols) is not
    what MLX calls: mapped alone, no OpenBLAS is loaded for MLX."""
    line = "7f0000000000-7f0000001000 r-xp 00000000 08:01 1234 "
    numpy_one = f"{line}/venv/numpy.libs/libopenblas64_p-r0-0cf96a72.3.23.dev.so\n"
    system = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so"
    monkeypatch.setattr(blas, "_maps", lambda: numpy_one)
    assert blas.loaded_openblas() is None
    monkeypatch.setattr(blas, "_maps", lambda: f"{numpy_one}{line}{system}\n")
    assert blas.loaded_openblas() == system
