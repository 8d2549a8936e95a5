"""Kernels and host waits per frame of a streamed greedy Nano request through
MLX, beside mlx-audio 0.6.2's, in one run (``graph_cost``'s counts).

    python bench/kernel_count.py CHECKPOINT [--as-on-a-gpu] [--json PATH]

Rows, per frame: our greedy frame step; a streamed request's frames 8 to
40, its chunks' decoding included (``streamed_cost``: what a client waits
for); our codec decode of a first chunk (one frame) and of a 16-frame chunk
(per frame); mlx-audio's greedy frame (``generate_audio_token_ids``), its
decode of one frame and of 16 at once, and its frame with its decode of 16
frames shared out. The ratio is our streamed frame over mlx-audio's frame
with its decode.

MLX's CPU backend has no kernel of its own for ``mx.fast.layer_norm``,
``rms_norm``, ``rope`` or ``scaled_dot_product_attention``: it builds each
from plain operations (a layer norm is five nodes compiled, eleven not; an
attention four or five), where Metal and CUDA run one kernel. And on the CPU
the codec decodes with its fast functions, each in two halves on two
threads (``codec_math``), where a GPU takes the exact ones whole. With
``--as-on-a-gpu`` the count is of the graph a GPU runs: before anything is
built, each of those fast operations becomes one node (an ``mx.depends`` on
its inputs stands in for it: the numbers are meaningless, only the count
is kept), and the codec takes the exact functions whole. Other copies a
GPU kernel may make of its inputs are not in any graph, so not counted.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

TEXT = "Hello there, this is a benchmark of streaming speech on a local machine."


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--as-on-a-gpu", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    return parser.parse_args()


def fast_operations_as_kernels() -> None:
    """Each ``mx.fast`` operation a GPU runs as one kernel is, from now on,
    one node of the graph (call before anything is compiled)."""
    import mlx.core as mx

    def one_node(*inputs):
        arrays = [each for each in inputs if isinstance(each, mx.array)]
        return mx.depends([arrays[0]], arrays[1:])[0]

    def attention(queries, keys, values, *, scale, mask=None, sinks=None):
        return one_node(queries, keys, values, mask, sinks)

    def rope(x, dims, *, traditional, base, scale, offset, freqs=None):
        return one_node(x, offset, freqs)

    mx.fast.layer_norm = lambda x, weight, bias, eps: one_node(x, weight, bias)
    mx.fast.rms_norm = lambda x, weight, eps: one_node(x, weight)
    mx.fast.scaled_dot_product_attention = attention
    mx.fast.rope = rope


def never_stopping() -> None:
    """Both loops' text heads choose another frame whatever they computed
    (with the stand-ins, the numbers would end a request at once): each
    choice is a constant that depends on the head's result, one more node a
    frame on both sides."""
    import mlx.core as mx
    from mlx_audio.tts.models.moss_tts_nano import moss_tts_nano

    from mlx_speech.families.moss_nano import loop

    ours, theirs = loop._text_head_choices, moss_tts_nano.sample_assistant_text_token
    constants: dict = {}

    def constant(value: int, shape: tuple, dtype) -> mx.array:
        """Built and evaluated once, so reading it costs no frame a node or a wait."""
        key = (value, shape, dtype)
        if key not in constants:
            constants[key] = mx.full(shape, value, dtype=dtype)
            mx.eval(constants[key])
        return constants[key]

    def our_choices(model, jobs, local_hidden):
        choices = ours(model, jobs, local_hidden)
        return mx.depends([constant(0, choices.shape, choices.dtype)], [choices])[0]

    def their_choice(logits, *, audio_assistant_slot_token_id, **keywords):
        chosen = theirs(
            logits, audio_assistant_slot_token_id=audio_assistant_slot_token_id, **keywords
        )
        slot = constant(audio_assistant_slot_token_id, chosen.shape, chosen.dtype)
        return mx.depends([slot], [chosen])[0]

    loop._text_head_choices = our_choices
    moss_tts_nano.sample_assistant_text_token = their_choice


def codec_math_as_on_a_gpu() -> None:
    """The codec's exact GELU and attention, each in one piece."""
    from mlx_speech.families.moss_nano import blocks, codec_math

    def whole(operation, axis, *arrays):
        return operation(*arrays)

    os.environ["MLX_SPEECH_EXACT"] = "1"
    codec_math.in_halves = blocks.in_halves = whole


def _made_frames(model, stepper, count: int = 16) -> list:
    from profile_frame import _new_jobs

    (job,) = _new_jobs(model, greedy=True, jobs=1)
    frames = []
    while len(frames) < count:
        stepper.step([job])
        frames.append(job.frame)
    return frames


def counts(checkpoint: Path) -> dict:
    """Per frame: each row's computing primitives and host syncs."""
    from mlx_audio.tts.utils import load_model
    from profile_frame import (
        _decode_cost,
        _step_cost,
        _their_decode_cost,
        _their_step_cost,
    )
    from streamed_cost import per_frame, streamed_frame_cost

    from mlx_speech.families import LoadOptions
    from mlx_speech.families.moss_nano.loop import MlxFrameStep
    from mlx_speech.families.moss_nano.service import load

    service = load(checkpoint, LoadOptions(accelerator=None))
    model, decoder = service._model, service._decodes._decoder
    stepper = MlxFrameStep(model, service._ops)
    made = _made_frames(model, stepper)
    theirs = load_model(checkpoint)
    _their_step_cost(theirs, frames=2)  # its first frames build what they keep
    rows = {
        "our greedy step": per_frame(*_step_cost(model, stepper, greedy=True)[:2]),
        "our streamed frame (8 to 40)": streamed_frame_cost(service, TEXT),
    }
    pieces = {
        "our decode, first chunk (1 frame)": _decode_cost(decoder, made[:1])[:2],
        "our decode, 16-frame chunk": _decode_cost(decoder, made)[:2],
        "mlx-audio's greedy step": _their_step_cost(theirs)[:2],
        "mlx-audio's decode of 1 frame": _their_decode_cost(theirs, made[:1])[:2],
        "mlx-audio's decode of 16 frames": _their_decode_cost(theirs, made)[:2],
    }
    rows |= {name: per_frame(cost, frames) for name, (cost, frames) in pieces.items()}
    step, decode = rows["mlx-audio's greedy step"], rows["mlx-audio's decode of 16 frames"]
    rows["mlx-audio's frame with its decode"] = {
        key: round(step[key] + decode[key], 3) for key in ("computing", "syncs")
    }
    return rows


def main() -> None:
    args = _arguments()
    import mlx_speech  # noqa: F401 - before MLX: on Linux, OpenBLAS under it

    if args.as_on_a_gpu:
        fast_operations_as_kernels()
        never_stopping()
        codec_math_as_on_a_gpu()
    rows = counts(Path(args.checkpoint))
    ours = rows["our streamed frame (8 to 40)"]["computing"]
    theirs = rows["mlx-audio's frame with its decode"]["computing"]
    shape = "as on a GPU" if args.as_on_a_gpu else "on MLX's CPU backend"
    print(f"per frame, {shape}                        computing    syncs")
    for name, row in rows.items():
        print(f"{name:42} {row['computing']:10.1f} {row['syncs']:8.3f}")
    print(f"ours streamed over mlx-audio's frame:      {ours / theirs:10.2f}")
    if args.json:
        result = {"as_on_a_gpu": args.as_on_a_gpu, "rows": rows, "ratio": ours / theirs}
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
