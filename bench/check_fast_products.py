"""How often a lone request's frames on the host change its codes.

    python bench/check_fast_products.py CHECKPOINT [--requests 20] [--frames 60]

Each request (English and Chinese sentences, half greedy, half sampled with a
seed) runs alone twice on the worker: through MLX (every product as mlx-audio
computes it) and on the host (the host engine's ``frame_step``: a greedy
request's products with MLX's numbers, so its codes must not change; a
sampled one's too where the lone order holds for every product shape, as
with OpenBLAS, else through the library's own product). It counts the
requests whose codes differ, the frame where each first differs, and the
frames compared. It runs MLX on the system OpenBLAS when one is
installed.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Streaming speech lets a listener start before the sentence is finished.",
    "Please confirm the meeting for Thursday at half past ten.",
    "A local server gives a chat model a voice without leaving the laptop.",
    "今天天气很好，我们去公园散步吧。",
    "你好，欢迎使用本地语音合成服务。",
    "请在下午三点之前把报告发给我。",
]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--frames", type=int, default=60)
    return parser.parse_args()


def _codes(model, request, stepper) -> list[list[int]]:
    from mlx_speech.families.moss_nano.loop import frames
    from mlx_speech.families.moss_nano.sampling import KeySequence

    text, sampling, seed = request
    prompt, _ = model.build_inference_input_ids(
        text=text, tokenizer=model.tokenizer, mode="continuation"
    )
    found = frames(model, prompt, sampling, KeySequence(seed), stepper=stepper)
    return [frame.tolist() for frame in found]


def _first_difference(a: list, b: list) -> int | None:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    args = _arguments()
    import mlx_speech
    from mlx_speech.engine import shared_engine
    from mlx_speech.families.moss_nano.loop import MlxFrameStep
    from mlx_speech.families.moss_nano.service import DEFAULTS, _frame_sampling
    from mlx_speech.host_engine.blas import active_blas
    from mlx_speech.host_engine.frame_step import HostStep

    tts = mlx_speech.load(args.checkpoint, backend="host")
    service = tts._service
    model, host = service._model, service._batch._stepper
    if not isinstance(host, HostStep):
        raise SystemExit("no host step here: it needs Linux's CPU and the C library")
    # through MLX, with the host engine's activations (MLX's numbers, faster)
    mlx = MlxFrameStep(model, service._ops)
    differing = []
    frames = 0
    for index in range(args.requests):
        greedy = index % 2 == 0
        options = replace(DEFAULTS, max_new_tokens=args.frames)
        if greedy:
            options = replace(options, temperature=0.0)
        text = SENTENCES[index % len(SENTENCES)]
        request = (text, _frame_sampling(options), 2000 + index)
        exact = shared_engine().call(lambda r=request: _codes(model, r, mlx))
        fast = shared_engine().call(lambda r=request: _codes(model, r, host))
        frames += len(exact)
        first = _first_difference(exact, fast)
        if first is not None:
            differing.append({"request": index, "greedy": greedy, "first_frame": first})
    print(
        json.dumps(
            {
                "backend": tts.backend,
                "blas": active_blas(),
                "requests": args.requests,
                "frames_compared": frames,
                "requests_with_different_codes": len(differing),
                "greedy_requests_with_different_codes": sum(d["greedy"] for d in differing),
                "differences": differing,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
