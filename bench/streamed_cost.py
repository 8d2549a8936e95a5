"""What a streamed Nano request costs the host per frame, as the worker runs
it: the frame steps and the chunks' codec decoding, in ``graph_cost``'s
terms (primitives evaluated, and host syncs).

    cost, frames = streamed_cost(service, text, first=8, last=40)
    streamed_frame_cost(service, text)  # the same, warmed, as a row per frame

The request is greedy and runs through the service's own ``synthesize``,
``FrameBatch`` and ``CodecBatch``, flushed in the worker's order (the batch
that produces audio first, then the frame step), each chunk read as its
listener reads it. Counting spans the frames after ``first`` up to
``last``, so a prompt and the first chunks are left out, as the issue that
set the budget measured.
"""

from __future__ import annotations

from graph_cost import GraphCost


def streamed_cost(service, text: str, first: int = 8, last: int = 40):
    """→ (``GraphCost`` of frames ``first + 1`` to ``last``, frames counted);
    fewer frames when the model stops before ``last``."""
    from mlx_speech.engine.batching import DeferredOutput, Pending
    from mlx_speech.families import SpeechInput

    asked = SpeechInput(text, sampling={"temperature": 0.0, "max_new_tokens": last})
    request = service.prepare(asked)
    frames_batch = service._batch
    cost, counting, frames = GraphCost(), False, 0
    for item in service.synthesize(request):
        if not isinstance(item, Pending):
            continue
        output = item.output if isinstance(item.output, DeferredOutput) else None
        if frames == first and not counting:
            cost.__enter__()
            counting = True
        if output is not None:
            output.batch.flush(1)
        if item.batch is frames_batch:
            item.batch.flush(1)
            frames += 1
        elif output is None or item.batch is not output.batch:
            item.batch.flush(1)
        if output is not None:
            output.result()  # the chunk as its listener gets it
        if frames == last:
            break
    if counting:
        cost.__exit__(None, None, None)
    return cost, max(frames - first, 0)


def per_frame(cost, frames: int) -> dict:
    """``cost`` over ``frames``: computing primitives and host syncs a frame."""
    return {
        "computing": round(cost.computing / frames, 1),
        "syncs": round(cost.syncs / frames, 3),
        "frames": frames,
    }


def streamed_frame_cost(service, text: str) -> dict:
    """``per_frame`` of frames 8 to 40, after a first request that leaves
    the prompt prefix cached (as a voice's requests after its first find it)."""
    streamed_cost(service, text, first=2, last=4)
    return per_frame(*streamed_cost(service, text))
