"""How often batching changes a MOSS-TTS-Nano request's codes.

    python bench/check_batch_exactness.py CHECKPOINT [--batch 8 16] [--frames 40]

For each batch size, that many requests (English and Chinese sentences, half
greedy, half sampled with a seed) start together and are stepped together on
the worker as the server steps them (on the host where the host engine's
frame step applies, the prompts sharing their products where its load check
allows; else through MLX, the prompts in one forward), then each again alone;
it counts the requests whose codes differ and the frames compared.
``--backend`` picks what runs them (default: ``MLX_SPEECH_BACKEND``, else
auto: the host engine where it can run). On Linux it runs MLX on the
system OpenBLAS when one is installed (pass --reference-blas to keep the
bundled reference BLAS).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Streaming speech lets a listener start before the sentence is finished.",
    "Please confirm the meeting for Thursday at half past ten.",
    "今天天气很好，我们去公园散步吧。",
    "你好，欢迎使用本地语音合成服务。",
]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--reference-blas", action="store_true")
    parser.add_argument("--backend", default=None, choices=("auto", "mlx", "host"))
    return parser.parse_args()


def _codes(model, stepper, requests, together: bool):
    from mlx_speech.families.moss_nano.loop import FrameJob
    from mlx_speech.families.moss_nano.sampling import KeySequence

    def job(request):
        text, sampling, seed = request
        prompt, _ = model.build_inference_input_ids(
            text=text, tokenizer=model.tokenizer, mode="continuation"
        )
        return FrameJob(model, prompt, sampling, KeySequence(seed))

    def run(jobs):
        codes = [[] for _ in jobs]
        while live := [j for j in jobs if not j.done]:
            stepper.step(live)
            for j in live:
                if not j.stopped:
                    codes[jobs.index(j)].append(j.frame.tolist())
        return codes

    if together:
        return run([job(request) for request in requests])
    return [run([job(request)])[0] for request in requests]


def main() -> None:
    args = _arguments()
    if args.reference_blas:
        import mlx.core  # noqa: F401 - first: mlx_speech then leaves MLX on it
    import mlx_speech  # else first: it brings OpenBLAS under MLX

    # isort: split
    from mlx_speech.engine import shared_engine
    from mlx_speech.families.moss_nano.service import DEFAULTS, _frame_sampling
    from mlx_speech.host_engine.blas import active_blas
    from mlx_speech.host_engine.frame_step import HostStep

    tts = mlx_speech.load(args.checkpoint, backend=args.backend)
    model, stepper = tts._service._model, tts._service._batch._stepper
    results = []
    for size in args.batch:
        requests = []
        for index in range(size):
            options = replace(DEFAULTS, max_new_tokens=args.frames)
            if index % 2 == 0:
                options = replace(options, temperature=0.0)
            requests.append(
                (SENTENCES[index % len(SENTENCES)], _frame_sampling(options), 1000 + index)
            )
        together = shared_engine().call(lambda r=requests: _codes(model, stepper, r, True))
        alone = shared_engine().call(lambda r=requests: _codes(model, stepper, r, False))
        differing = [i for i in range(size) if together[i] != alone[i]]
        results.append(
            {
                "batch": size,
                "requests_with_different_codes": len(differing),
                "greedy_requests_with_different_codes": sum(i % 2 == 0 for i in differing),
                "frames_compared": sum(len(codes) for codes in alone),
            }
        )
    stepped = "on the host" if isinstance(stepper, HostStep) else "through MLX"
    record = {"backend": tts.backend, "blas": active_blas(), "stepped": stepped}
    print(json.dumps({**record, "results": results}, indent=2))


if __name__ == "__main__":
    main()
