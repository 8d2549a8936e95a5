"""Spreading the chunk decodes of concurrent requests across rounds: eight
requests that started together hand over their chunks so that no round
decodes more than its budget of frames, each chunk still holds the frames
the ``ChunkSchedule`` gives it, and each request's audio is what it would
get decoded alone."""

from __future__ import annotations

import numpy as np
import pytest

from mlx_speech.engine import shared_engine
from mlx_speech.families.chunk_schedule import ChunkSchedule
from mlx_speech.families.moss_nano import batch
from mlx_speech.families.moss_nano.batch import CodecBatch
from mlx_speech.families.moss_nano.chunk_release import ChunkRelease
from mlx_speech.families.moss_nano.codec import with_channels

REQUESTS, FRAMES = 8, 70


def _planned_chunks(frames: int) -> list[int]:
    schedule, sizes, left = ChunkSchedule(), [], frames
    while left:
        size = min(left, schedule.frames_for_next_chunk())
        sizes.append(size)
        schedule.chunk_done(size)
        left -= size
    return sizes


def _lockstep(tts) -> dict:
    """Worker thread: ``REQUESTS`` releases fed a frame each per round, as a
    burst's requests are, the shared decode flushed after every round; then
    each request's frames decoded alone in the planned chunks."""
    import mlx.core as mx

    service = tts._service
    n_vq = service._model.config.n_vq
    decoder = service._decodes._decoder  # the backend's: MLX's or the host engine's
    decodes = CodecBatch(decoder, n_vq, service.sample_rate)
    rng = np.random.default_rng(3)
    frames = [
        [mx.array(rng.integers(0, 64, (n_vq,)), dtype=mx.int32) for _ in range(FRAMES)]
        for _ in range(REQUESTS)
    ]
    releases = [ChunkRelease(decodes, decodes.state()) for _ in range(REQUESTS)]
    rests = [release.rest() for release in releases]  # lazy: used after the frames
    handed: list[list] = [[] for _ in range(REQUESTS)]  # (round, output)
    round_, handed_now = 0, []
    while round_ <= FRAMES or handed_now:
        handed_now = []
        for index, release in enumerate(releases):
            if round_ < FRAMES:
                release.add(frames[index][round_])
                chunk = release.due()
            else:
                chunk = next(rests[index], None)
            if chunk is not None:
                handed[index].append((round_, chunk))
                handed_now.append(chunk)
        decodes.flush(REQUESTS)
        round_ += 1
    per_frame = service.samples_per_frame
    sizes = [[len(out.result().samples) // per_frame for _, out in h] for h in handed]
    per_round: dict[int, int] = {}
    for request, request_sizes in zip(handed, sizes, strict=True):
        for (at, _), size in zip(request, request_sizes, strict=True):
            per_round[at] = per_round.get(at, 0) + size
    alone = []
    for request_frames in frames:
        state, samples, start = decoder.state(), [], 0
        for size in _planned_chunks(FRAMES):
            chunk = request_frames[start : start + size]
            (decoded,) = decoder.decode_together([(state, chunk)])
            samples.append(np.asarray(with_channels(decoded, 1)))
            start += size
        alone.append(np.concatenate(samples))
    return {
        "per_round": per_round,
        "sizes": sizes,
        "rounds": [[at for at, _ in request] for request in handed],
        "heard": [np.concatenate([out.result().samples for _, out in h]) for h in handed],
        "alone": alone,
    }


@pytest.mark.parametrize("budget", [16, None], ids=["one-chunk", "default"])
def test_a_burst_spreads_its_chunk_decodes_across_rounds(speaking_tts, monkeypatch, budget):
    """With a round's budget of one largest chunk, the lockstep is spread;
    with the default, eight requests' largest chunks share a round."""
    if budget is not None:
        monkeypatch.setattr(batch, "FRAMES_PER_ROUND", budget)
    result = shared_engine().call(lambda: _lockstep(speaking_tts))
    plan = _planned_chunks(FRAMES)
    assert all(sizes == plan for sizes in result["sizes"])  # the chunks are unchanged
    assert all(rounds[0] == 0 for rounds in result["rounds"])  # first chunks never wait
    within_frames = [n for at, n in result["per_round"].items() if at < FRAMES]
    assert max(within_frames) <= batch.FRAMES_PER_ROUND
    ends = np.cumsum(plan) - 1  # the round each chunk's last frame arrives
    for rounds in result["rounds"]:
        for chunk, handed in enumerate(rounds[:-1]):
            assert ends[chunk] <= handed
            assert chunk + 1 == len(plan) - 1 or handed <= ends[chunk + 1]
    large = next(index for index, size in enumerate(plan) if size >= 8)
    waited = [rounds[large] - ends[large] for rounds in result["rounds"]]
    spread = budget is not None  # a budget below the burst's largest chunks
    assert bool(max(waited) > 0) is spread
    for heard, alone in zip(result["heard"], result["alone"], strict=True):
        assert heard.shape == alone.shape
        np.testing.assert_allclose(heard, alone, atol=1e-6)


def _chunks_around_a_step(tts) -> dict:
    """Worker thread: a request's first chunk, a later one and a last one
    through a ``CodecBatch`` tied to a ``FrameBatch``, flushed in the
    worker's order; which of them were handed out before the frame step."""
    import mlx.core as mx

    from mlx_speech.families.moss_nano.batch import FrameBatch
    from mlx_speech.families.moss_nano.loop import FrameJob, FrameSampling
    from mlx_speech.families.moss_nano.sampling import GREEDY_HEAD, KeySequence

    service = tts._service
    model, decoder = service._model, service._decodes._decoder
    steps = FrameBatch(service._batch._stepper)
    decodes = CodecBatch(decoder, model.config.n_vq, service.sample_rate, frames=steps)
    prompt, _ = model.build_inference_input_ids(
        text="Hello.", tokenizer=model.tokenizer, mode="continuation"
    )
    job = FrameJob(
        model, prompt, FrameSampling(GREEDY_HEAD, GREEDY_HEAD, 1.0, 50), KeySequence(0)
    )
    rng = np.random.default_rng(5)
    chunks = [
        [mx.array(rng.integers(0, 64, (model.config.n_vq,)), dtype=mx.int32)] * size
        for size in (1, 2, 1)
    ]
    state, handed_before_step, outputs = decodes.state(), [], []
    for index, chunk in enumerate(chunks):
        output = decodes.decode(state, chunk, first=index == 0)
        step_follows = index < 2
        if step_follows:
            steps.submit(job)
        decodes.flush(8)
        handed_before_step.append(output.done)
        if step_follows:
            steps.flush(8)
        outputs.append(output.result().samples)
    alone_state = decoder.state()
    alone = [
        with_channels(decoder.decode_together([(alone_state, chunk)])[0], 1)
        for chunk in chunks
    ]
    return {"before_step": handed_before_step, "heard": outputs, "alone": alone}


def test_a_later_chunk_shares_the_frame_steps_wait_through_mlx(speaking_tts, nano_backend):
    """Through MLX a later chunk is queued before the frame step and handed
    out after it, with no wait of its own; a first chunk, and a chunk with
    no step after it, are handed out at once. The host decoder computes on
    the host and hands every chunk out at once. The audio is the same."""
    result = shared_engine().call(lambda: _chunks_around_a_step(speaking_tts))
    assert result["before_step"] == [True, nano_backend != "mlx", True]
    for heard, alone in zip(result["heard"], result["alone"], strict=True):
        np.testing.assert_array_equal(heard, alone)
