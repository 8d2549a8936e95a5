"""What the C library's GELUs and softmax save, and that they change nothing.

    python bench/check_exact_activations.py CHECKPOINT [--repeats 3] [--json out.json]

With the library's GELUs and attention (the host engine's ``ArrayOps``, from
``mlx_speech/host_engine/csrc/``) and without them (``MLX_OPS``:
MLX's own operations, as where it cannot be built), taking turns in one
process, ``--repeats`` times: encoding a 3 s reference clip, a new
voice's prompt prefix (that clip's rows and the template around them), one
38-row prompt and eight at once, and decoding 16 frames in the exact mode.
(The frame step runs on the host only with the library:
``bench/profile_frame.py`` measures it.)
Prints the best of each, and whether the reference codes, the prefix's KV
state and the decoded audio are bit for bit the same both ways. On Linux it
runs MLX on the system OpenBLAS when one is installed.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np

TEXT = "Hello there, this is a benchmark of streaming speech on a local machine."


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    return parser.parse_args()


def _timed(work) -> tuple[float, object]:
    import mlx.core as mx

    started = time.perf_counter()
    result = work()
    mx.eval(result)
    return (time.perf_counter() - started) * 1000, result


def _workloads(service) -> dict:
    """Name → a function doing that work with the ``ArrayOps`` it is given
    and returning what it computed."""
    import mlx.core as mx

    from mlx_speech.families.moss_nano.codec import DecoderState, decode_together, encode
    from mlx_speech.families.moss_nano.codec_math import codec_math
    from mlx_speech.families.moss_nano.forward import forward_rows
    from mlx_speech.families.moss_nano.kv_cache import block_caches, snapshot
    from mlx_speech.families.moss_nano.loop import FrameJob, MlxFrameStep, embed_rows
    from mlx_speech.families.moss_nano.sampling import KeySequence
    from mlx_speech.families.moss_nano.service import DEFAULTS, _frame_sampling

    model, codec = service._model, service._codec
    generator = np.random.default_rng(0)
    clip = (
        generator.standard_normal((3 * codec.sample_rate, codec.channels)) * 0.1
    ).astype(np.float32)
    reference = mx.array(encode(codec, clip, model.config.n_vq))
    voice_prompt = service._prompt(TEXT, reference)
    split = (
        service._rows_before_reference + reference.shape[0] + service._rows_after_reference
    )
    text_rows = [
        mx.random.normal((1, 38, model.config.gpt2_config.n_embd)) for _ in range(8)
    ]
    sampling = _frame_sampling(replace(DEFAULTS, max_new_tokens=10**6))
    prompt, _ = model.build_inference_input_ids(
        text=TEXT, tokenizer=model.tokenizer, mode="continuation"
    )
    job = FrameJob(model, prompt, sampling, KeySequence(0))
    stepper = MlxFrameStep(model)
    frames = []
    for _ in range(16):
        stepper.step([job])
        frames.append(job.frame)
    mx.eval(frames)

    def encoded(ops):
        return mx.array(encode(codec, clip, model.config.n_vq, codec_math(ops)))

    def prefix(ops):
        cache = block_caches(len(model.transformer.h))
        forward_rows(
            model.transformer, [embed_rows(model, voice_prompt[:, :split])], [cache], ops
        )
        return snapshot(cache)

    def prompts(count: int, ops):
        caches = [block_caches(len(model.transformer.h)) for _ in range(count)]
        return forward_rows(model.transformer, text_rows[:count], caches, ops)

    def decode(ops):
        state = DecoderState(codec)
        work = [(state, frames)]
        return decode_together(codec, model.config.n_vq, work, codec_math(ops))

    return {
        "encode a 3 s clip": encoded,
        "a new voice's prefix": prefix,
        "one 38-row prompt": partial(prompts, 1),
        "eight 38-row prompts": partial(prompts, 8),
        "decode 16 frames (exact mode)": decode,
    }


def main() -> None:
    args = _arguments()
    from mlx_speech.families import LoadOptions
    from mlx_speech.families.moss_nano.accelerator import MLX_OPS
    from mlx_speech.families.moss_nano.service import load
    from mlx_speech.host_engine.blas import active_blas  # OpenBLAS under MLX
    from mlx_speech.host_engine.engine import Unavailable, open_host_engine

    try:
        engine = open_host_engine()
    except Unavailable as why:
        raise SystemExit(f"the C library cannot run here: {why}") from None
    service = load(Path(args.checkpoint), LoadOptions(accelerator=engine))
    workloads = _workloads(service)
    sides = {"MLX": MLX_OPS, "C": engine.array_ops()}
    best = {side: dict.fromkeys(workloads, float("inf")) for side in sides}
    outputs: dict = {side: {} for side in sides}
    for _ in range(args.repeats):
        for side, ops in sides.items():
            for name, work in workloads.items():
                ms, output = _timed(partial(work, ops))
                best[side][name] = min(best[side][name], ms)
                outputs[side].setdefault(name, output)
    same = {
        name: _bitwise_equal(outputs["MLX"][name], outputs["C"][name])
        for name in (
            "encode a 3 s clip",
            "a new voice's prefix",
            "decode 16 frames (exact mode)",
        )
    }
    results = {
        "checkpoint": args.checkpoint,
        "blas": active_blas(),
        "repeats": args.repeats,
        "ms": {
            name: {side: round(best[side][name], 1) for side in sides} for name in workloads
        },
        "bit_for_bit_equal": same,
    }
    print(f"{args.checkpoint}; BLAS {results['blas']}; best of {args.repeats}, ms")
    for name, row in results["ms"].items():
        ratio = row["C"] / row["MLX"]
        print(f"{name:30} MLX {row['MLX']:8.1f}   C {row['C']:8.1f}   ({ratio:.2f}x)")
    print("bit for bit the same:", same)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def _bitwise_equal(first, second) -> bool:
    from mlx.utils import tree_flatten

    left = [np.asarray(value) for _, value in tree_flatten(first)]
    right = [np.asarray(value) for _, value in tree_flatten(second)]
    if len(left) != len(right):
        return False
    pairs = zip(left, right, strict=True)
    return all(a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in pairs)


if __name__ == "__main__":
    main()
