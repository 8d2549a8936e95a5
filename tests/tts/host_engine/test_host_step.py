"""The host engine's frame step (``host_engine.frame_step``): MLX's codes for a request
alone and for requests stepped together, joining and leaving."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import mlx.core as mx
import numpy as np
import pytest
from mlx_audio.tts.utils import load_model

from mlx_speech.families.moss_nano.loop import FrameJob, FrameSampling, MlxFrameStep
from mlx_speech.families.moss_nano.loop import frames as loop_frames
from mlx_speech.families.moss_nano.sampling import (
    GREEDY_HEAD,
    HeadSampler,
    KeySequence,
    _filtered_draw,
    draw_uniforms,
)
from mlx_speech.families.moss_nano.service import TEXT_HEAD
from mlx_speech.host_engine import frame_step as host_step_module
from mlx_speech.host_engine.frame_step import HostStep
from tests.tts.support.host_engine import host_step_for, needs_host_library

pytestmark = needs_host_library

SAMPLED = HeadSampler(0.8, 25, 0.95)


@pytest.fixture(scope="module")
def model(speaking_dir):
    return load_model(Path(speaking_dir))


@pytest.fixture(scope="module")
def stopping(stopping_dir):
    return load_model(Path(stopping_dir))


@pytest.fixture(scope="module")
def host(model) -> HostStep:
    found = host_step_for(model)
    assert found is not None, "the host step should pass its check on MLX's own BLAS"
    return found


def _prompt(model, text: str = "Hello there, how are you?"):
    return model.build_inference_input_ids(
        text=text, tokenizer=model.tokenizer, mode="continuation"
    )[0]


def _sampling(text: HeadSampler, audio: HeadSampler, frames: int) -> FrameSampling:
    return FrameSampling(text=text, audio=audio, repetition_penalty=1.2, max_frames=frames)


def _codes(
    model,
    host,
    text,
    audio,
    frames: int,
    seed: int = 5,
    words: str = "Hello there, how are you?",
) -> list[list[int]]:
    sampling = _sampling(text, audio, frames)
    found = loop_frames(
        model, _prompt(model, words), sampling, KeySequence(seed), stepper=host
    )
    return [frame.tolist() for frame in found]


@pytest.mark.parametrize(
    ("text", "audio"),
    [(GREEDY_HEAD, GREEDY_HEAD), (TEXT_HEAD, GREEDY_HEAD), (TEXT_HEAD, SAMPLED)],
    ids=["greedy", "sampled-stop-head", "sampled"],
)
def test_lone_codes_equal_mlxs(model, host, text, audio):
    theirs = _codes(model, None, text, audio, 24)
    assert len(theirs) == 24
    assert _codes(model, host, text, audio, 24) == theirs


def test_stop_frame_is_unchanged(stopping):
    host = host_step_for(stopping)
    theirs = _codes(stopping, None, TEXT_HEAD, SAMPLED, 200, seed=2)
    assert 0 < len(theirs) < 200
    ours = _codes(stopping, host, TEXT_HEAD, SAMPLED, 200, seed=2)
    assert ours == theirs


def _words_for_prompt_rows(model, least: int) -> str:
    """Text whose prompt has at least ``least`` rows (and at most a word's more)."""
    words = []
    while _prompt(model, " ".join(words)).shape[1] < least:
        words.append(f"word{len(words)}")
    return " ".join(words)


@pytest.mark.parametrize(
    ("least_rows", "frames"), [(244, 24), (262, 6)], ids=["between-frames", "in-prompt"]
)
def test_codes_stay_mlxs_where_a_requests_cache_grows(model, host, least_rows, frames):
    """Keys and values grow by blocks of 256 positions: between two frames,
    or within a prompt."""
    words = _words_for_prompt_rows(model, least_rows)
    theirs = _codes(model, None, TEXT_HEAD, SAMPLED, frames, words=words)
    assert len(theirs) == frames
    assert _codes(model, host, TEXT_HEAD, SAMPLED, frames, words=words) == theirs


# (text head, audio head, frame budget, seed, text, the round it joins)
_COMPANY = [
    (GREEDY_HEAD, GREEDY_HEAD, 20, 5, "Hello there, how are you?", 0),
    (TEXT_HEAD, SAMPLED, 8, 9, "A longer sentence, so that its prompt has more rows.", 3),
    (TEXT_HEAD, HeadSampler(1.0, 50, 1.0), 14, 11, "Short.", 0),
    (TEXT_HEAD, SAMPLED, 6, 3, "One that joins late.", 9),
]


def _codes_in_company(model, host, rounds: int = 24) -> list[list[list[int]]]:
    """Each job of ``_COMPANY``: it joins at its round, prompt and all,
    beside the jobs still running, and leaves when done."""
    jobs = [
        FrameJob(
            model, _prompt(model, words), _sampling(text, audio, frames), KeySequence(seed)
        )
        for text, audio, frames, seed, words, _ in _COMPANY
    ]
    codes: list[list[list[int]]] = [[] for _ in jobs]
    for round_ in range(rounds):
        group = [
            job
            for job, spec in zip(jobs, _COMPANY, strict=True)
            if spec[-1] <= round_ and not job.done
        ]
        if group:
            (host or MlxFrameStep(model)).step(group)
        for job, own in zip(jobs, codes, strict=True):
            if job in group and job.frame is not None:
                own.append(job.frame.tolist())
    assert all(job.done for job in jobs)
    return codes


def _stepped_together(model, jobs, host) -> list[list[list[int]]]:
    """Each job's codes, ``jobs`` stepped together until all are done."""
    codes: list[list[list[int]]] = [[] for _ in jobs]
    while not all(job.done for job in jobs):
        live = [job for job in jobs if not job.done]
        (host or MlxFrameStep(model)).step(live)
        for job, own in zip(jobs, codes, strict=True):
            if job in live and job.frame is not None:
                own.append(job.frame.tolist())
    return codes


def test_jobs_together_get_mlxs_codes_and_their_own(model, host):
    """Stepped together on the host (joining with their prompts, leaving when
    done, the last one alone): each job's codes are those MLX gives the same
    company, and those it gets alone."""
    ours = _codes_in_company(model, host)
    assert [len(own) for own in ours] == [20, 8, 14, 6]
    assert ours == _codes_in_company(model, None)
    for stepped in (None, host):
        alone = [
            _codes(model, stepped, text, audio, frames, seed, words)
            for text, audio, frames, seed, words, _ in _COMPANY
        ]
        assert ours == alone


def test_prompts_that_join_together_share_products_and_keep_their_codes(
    model, host, monkeypatch
):
    """Jobs that start in one round have their prompts' rows stacked in each
    product; each gets the codes it gets alone."""
    texts = ["Hello there, how are you?", "Short.", "One that joins late."]
    specs = [(TEXT_HEAD, SAMPLED, 6, seed, words) for seed, words in enumerate(texts)]
    stacked: list[int] = []
    stacking = host._global_prompts

    def recording(hosts):
        stacked.append(len(hosts))
        return stacking(hosts)

    monkeypatch.setattr(host, "_global_prompts", recording)
    monkeypatch.setattr(host_step_module, "STACKED_ROWS", 512)  # 336 rows: all three
    jobs = [
        FrameJob(model, _prompt(model, words), _sampling(t, a, n), KeySequence(seed))
        for t, a, n, seed, words in specs
    ]
    together = _stepped_together(model, jobs, host)
    assert stacked[0] == 3  # all three prompts in one pass
    monkeypatch.undo()
    alone = [_codes(model, host, *spec) for spec in specs]
    assert together == alone
    assert alone == [_codes(model, None, *spec) for spec in specs]


def test_prompts_stack_in_order_up_to_the_row_bound_and_short_ones_alone(host, monkeypatch):
    lengths = [200, 56, 40, 240, 2, 300]  # 2: OpenBLAS's small kernel takes it alone
    hosts = [SimpleNamespace(rows=np.zeros((count, 1))) for count in lengths]
    monkeypatch.setattr(host_step_module, "STACKED_ROWS", 256)
    groups = host._prompt_groups(hosts, list(range(len(hosts))))
    assert groups == [[0, 1], [2], [3], [5], [4]]
    monkeypatch.setattr(host, "_stacking", False)  # the load check found otherwise
    assert host._prompt_groups(hosts, [0, 1, 2]) == [[0], [1], [2]]


@pytest.mark.parametrize("changed_past", [None, 16, 64])
def test_stacking_is_off_where_stacked_rows_would_change_numbers(host, changed_past):
    """The load check compares stacked prompts with each alone: a product
    whose rows change once more than ``changed_past`` share it turns
    stacking off, on the tiny model's shapes too."""
    from mlx_speech.host_engine.kernels import stacking_holds

    kernels = host._kernels

    def through(product, x, w, bias=None):
        out = kernels.through(product, x, w, bias)
        if changed_past is not None and len(x) > changed_past:
            out = np.nextafter(out, np.float32(np.inf))
        return out

    shifting = SimpleNamespace(
        small_kernel_takes=kernels.small_kernel_takes,
        rows_product=kernels.rows_product,
        through=through,
    )
    held = stacking_holds(shifting, host._prompt_shapes, np.random.default_rng(0))
    assert held is (changed_past is None)


def test_own_products_are_the_same_whatever_rows_share_them(host):
    """A row's numbers from the library's own product: the same alone and in
    any company (4-row tiles, a tail of outputs, products split between two
    threads or not), and float64's within float32's rounding."""
    generator = np.random.default_rng(3)
    for outs, ins in ((7, 40), (1030, 768)):
        x = generator.standard_normal((9, ins)).astype(np.float32)
        w = generator.standard_normal((outs, ins)).astype(np.float32)
        together = host._kernels.products(x, w, own=True)
        for start, stop in ((0, 1), (4, 5), (8, 9), (0, 4), (3, 8), (1, 6)):
            part = host._kernels.products(x[start:stop], w, own=True)
            np.testing.assert_array_equal(part, together[start:stop])
        exact = x.astype(np.float64) @ w.astype(np.float64).T
        scale = np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64).T
        assert np.all(np.abs(together - exact) <= 1e-6 * scale)
        assert not np.array_equal(together, host._kernels.products(x, w))  # not sgemm's


def test_products_shared_with_a_busy_core_are_whole_and_the_same(host):
    """With another process taking a core, the worker thread and the helper
    take the pieces of a product as they can: every output is still written,
    with the numbers it gets when the cores are free."""
    generator = np.random.default_rng(4)
    w = generator.standard_normal((1030, 768)).astype(np.float32)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for name in ("own_product", "chained_product"):
            product = getattr(host._kernels, name)
            for rows in (1, 9):
                x = generator.standard_normal((rows, 768)).astype(np.float32)
                first = None
                for _ in range(150):
                    out = np.full((rows, 1030), np.nan, dtype=np.float32)
                    at = host._kernels.at
                    product(at(x), rows, at(w), at(None), at(out), 1030, 768)
                    if first is None:
                        first = out
                    np.testing.assert_array_equal(out, first)
                assert not np.isnan(first).any()
    finally:
        busy.kill()
        busy.wait()


def test_jobs_that_stop_beside_others(stopping):
    """Sampling jobs stepped together until each stops by itself."""
    host = host_step_for(stopping)
    jobs = [
        FrameJob(
            stopping,
            _prompt(stopping, words),
            _sampling(TEXT_HEAD, SAMPLED, 200),
            KeySequence(seed),
        )
        for seed, words in ((2, "Hello there, how are you?"), (4, "Fine."), (7, "And you?"))
    ]
    codes = _stepped_together(stopping, jobs, host)
    assert all(job.stopped for job in jobs)
    for (seed, words), own in zip(
        ((2, "Hello there, how are you?"), (4, "Fine."), (7, "And you?")),
        codes,
        strict=True,
    ):
        assert own == _codes(stopping, None, TEXT_HEAD, SAMPLED, 200, seed, words)


def test_reference_mode_takes_mlxs_products(model, monkeypatch):
    monkeypatch.setenv("MLX_SPEECH_EXACT", "1")
    exact = host_step_for(model)
    assert exact is not None and not exact.own_for_sampling
    theirs = _codes(model, None, TEXT_HEAD, SAMPLED, 12)
    assert _codes(model, exact, TEXT_HEAD, SAMPLED, 12) == theirs


@pytest.mark.parametrize("everywhere", [True, False], ids=["lone", "own"])
def test_sampling_takes_mlxs_numbers_where_the_lone_order_holds_everywhere(
    model, monkeypatch, everywhere
):
    """Where every product shape passed the lone order's check (OpenBLAS), a
    seeded sampled request takes MLX's numbers (its codes MLX's), and the
    local transformer has its panels; where any did not, the library's own
    products, and no panels."""
    from mlx_speech.host_engine import step_checks as module

    monkeypatch.setattr(module, "trust_lone_shapes", lambda *arguments: everywhere)
    host = host_step_for(model)
    assert host is not None and host.own_for_sampling is not everywhere
    # the local transformer's panels: made only where its products chain
    panels = host._global.panel_bytes + host._local.panel_bytes
    assert (panels > 0) is everywhere
    assert host.held_bytes == panels + host._text_head.nbytes + host._work.nbytes
    kinds = []
    through = HostStep._global_rows

    def recorded(self, hosts, own=False):
        kinds.append(own)
        return through(self, hosts, own)

    monkeypatch.setattr(HostStep, "_global_rows", recorded)
    ours = _codes(model, host, TEXT_HEAD, SAMPLED, 12)
    assert set(kinds) == {not everywhere}
    if everywhere:
        assert ours == _codes(model, None, TEXT_HEAD, SAMPLED, 12)


@pytest.mark.parametrize(
    "sampler", [SAMPLED, HeadSampler(1.0, 3, 1.0)], ids=["default", "k3"]
)
def test_host_draws_equal_mlxs_even_with_a_tie_at_the_top_k_boundary(host, sampler):
    generator = np.random.default_rng(8)
    for row in range(30):
        logits = generator.standard_normal(1024).astype(np.float32)
        if row % 2:  # the k-th and the next largest equal: MLX's partition decides
            order = np.argsort(-logits)
            logits[order[sampler.top_k]] = logits[order[sampler.top_k - 1]]
        uniform = float(np.float32(generator.random()))
        theirs = _filtered_draw(mx.array(logits[None]), mx.array([[uniform]]), sampler)
        assert host._kernels.draw(logits, sampler, uniform) == theirs.item()


def test_rows_picked_together_are_each_picked_as_mlx_picks_it_alone(host):
    """Eight rows picked in one call (shared with the helper thread), among
    them a largest logit of zero with both signs, a tie at the top-k
    boundary and a NaN: each row's token MLX's draw of that row."""
    generator = np.random.default_rng(9)
    logits = generator.standard_normal((8, 1024)).astype(np.float32)
    logits[1] = -np.abs(logits[1])
    logits[1, [7, 300]] = [-0.0, 0.0]
    order = np.argsort(-logits[2])
    logits[2, order[SAMPLED.top_k]] = logits[2, order[SAMPLED.top_k - 1]]
    logits[3, 11] = np.nan
    uniforms = [float(np.float32(value)) for value in generator.random(8)]
    ours = host._kernels.picks(logits.copy(), [SAMPLED] * 8, uniforms)
    for row, uniform in enumerate(uniforms):
        theirs = _filtered_draw(mx.array(logits[row][None]), mx.array([[uniform]]), SAMPLED)
        assert ours[row] == theirs.item(), row


def test_host_uniforms_and_keys_are_mlxs(host):
    """The uniforms of a frame's draws, taken on the host from MLX keys, and
    the keys they leave: MLX's bit for bit."""
    for count in (1, 4, 17):
        seeds = [count * 100 + index for index in range(30)]
        theirs = [KeySequence(seed) for seed in seeds]
        ours = [KeySequence(seed) for seed in seeds]
        expected = np.array(draw_uniforms(theirs, count))[:, :, 0]
        keys = np.stack([sequence.words() for sequence in ours])
        np.testing.assert_array_equal(host._kernels.uniforms(keys, count), expected)
        for sequence, words in zip(ours, keys, strict=True):
            sequence.continue_from(words)
        for mine, reference in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(np.array(mine.next()), np.array(reference.next()))


@pytest.mark.parametrize("broken", ["products", "draw", "uniforms"])
def test_a_host_step_that_differs_from_mlx_anywhere_is_not_used(model, monkeypatch, broken):
    """One product a ulp off, one draw a token off, or one uniform a ulp
    off: frames stay in MLX."""
    from mlx_speech.host_engine.kernels import Kernels

    honest = getattr(Kernels, broken)

    def off(self, *arguments, **keywords):
        result = honest(self, *arguments, **keywords)
        if broken == "draw":
            return result + 1
        return np.nextafter(result, np.float32(np.inf))

    monkeypatch.setattr(Kernels, broken, off)
    assert host_step_for(model) is None


_FORKED_PRODUCT = """
import os, numpy as np
from mlx_speech.host_engine.blas import mlx_blas
from mlx_speech.host_engine.library import exact_activations
from mlx_speech.host_engine.kernels import Kernels
kernels = Kernels(exact_activations().native, mlx_blas())
x, w = np.ones((2, 768), np.float32), np.ones((1024, 768), np.float32)
before = kernels.products(x, w, own=True)  # the helper thread is running
child = os.fork()
if child == 0:
    os._exit(0 if np.array_equal(kernels.products(x, w, own=True), before) else 3)
_, status = os.waitpid(child, 0)
raise SystemExit(os.waitstatus_to_exitcode(status))
"""


def test_own_products_work_in_a_forked_child():
    """A child forked while the helper thread runs starts a helper of its
    own (it would otherwise wait for one that does not exist)."""
    result = subprocess.run(
        [sys.executable, "-c", _FORKED_PRODUCT], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
