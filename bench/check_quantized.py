"""Quantized MOSS-TTS-Nano (``--quantize 8|4``) against the float model.

    python bench/check_quantized.py CHECKPOINT [--frames 48] [--repeats 2]
        [--backend mlx|host]

The float model and its 8- and 4-bit versions speak the bench texts greedily
(``--frames`` each). Reported per quantization: how many frames equal the
float model's (all codebooks; the loop is autoregressive, so after the first
differing frame the rest usually differ too, hence also the first differing
frame per text), the SNR of its audio against the float audio, the bytes of
its transformer weights, and its steady ms/frame (60 frames minus 20, best of
``--repeats``, the models taking turns), each stepped as the server steps it,
and the backend that runs it (``--backend``; default: ``MLX_SPEECH_BACKEND``,
else auto: the host engine where it can run). On Linux it runs MLX on
the system OpenBLAS when one is installed.

A random-weight checkpoint's logits are nearly flat, so near-ties (and so
differing codes) are far more common than with trained weights: its
agreement is a floor, not a forecast.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

TEXTS = (
    "Hello there, this is a benchmark of streaming speech on a local machine.",
    "The quick brown fox jumps over the lazy dog, and then it runs away.",
    "你好，欢迎使用语音合成服务。这是第二句话！",
)
VARIANTS = (None, 8, 4)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--backend", default=None, choices=("auto", "mlx", "host"))
    parser.add_argument("--json", default=None)
    return parser.parse_args()


def _greedy(frames: int):
    from mlx_speech.families.moss_nano.service import DEFAULTS, _frame_sampling

    return _frame_sampling(replace(DEFAULTS, temperature=0.0, max_new_tokens=frames))


def _codes(service, text: str, frames: int) -> list:
    from mlx_speech.families.moss_nano.loop import frames as frame_loop
    from mlx_speech.families.moss_nano.sampling import KeySequence

    model = service._model
    prompt, _ = model.build_inference_input_ids(
        text=text, tokenizer=model.tokenizer, mode="continuation"
    )
    # as served: on the host step where the model has one (float weights on
    # Linux with the host engine), through MLX otherwise (quantized weights)
    stepper = service._batch._stepper
    return list(frame_loop(model, prompt, _greedy(frames), KeySequence(0), stepper=stepper))


def _audio(service, codes: list) -> np.ndarray:
    import mlx.core as mx

    from mlx_speech.families.moss_nano.codec import DecoderState, decode_together
    from mlx_speech.families.moss_nano.codec_math import codec_math

    model, codec = service._model, service._codec
    state = DecoderState(codec)
    frames = [mx.array(frame) for frame in codes]
    exact = codec_math(service._ops)  # with the service's activations
    (samples,) = decode_together(codec, model.config.n_vq, [(state, frames)], exact)
    mx.eval(samples)
    return np.asarray(samples, dtype=np.float64)


def _seconds(service, frames: int) -> float:
    import mlx.core as mx

    started = time.perf_counter()
    codes = _codes(service, TEXTS[0], frames)
    mx.eval(codes)
    return time.perf_counter() - started


def _transformer_bytes(model) -> int:
    from mlx.utils import tree_flatten

    return sum(
        value.nbytes
        for name, value in tree_flatten(model.parameters())
        if name.startswith(("transformer.", "local_transformer."))
    )


def main() -> None:
    args = _arguments()
    from mlx_speech.backends import accelerator_for, requested_backend
    from mlx_speech.families import LoadOptions
    from mlx_speech.families.moss_nano.service import FAMILY, load
    from mlx_speech.host_engine.blas import active_blas  # OpenBLAS under MLX

    accelerator, _ = accelerator_for(requested_backend(args.backend), FAMILY)
    services = {
        bits: load(Path(args.checkpoint), LoadOptions(1, bits, accelerator))
        for bits in VARIANTS
    }
    codes = {
        bits: [[np.asarray(f) for f in _codes(s, t, args.frames)] for t in TEXTS]
        for bits, s in services.items()
    }
    audio = {
        bits: np.concatenate([_audio(services[bits], c) for c in codes[bits]])
        for bits in VARIANTS
    }
    steady = {bits: math.inf for bits in VARIANTS}
    for _ in range(args.repeats):
        for bits, service in services.items():
            ms = (_seconds(service, 60) - _seconds(service, 20)) / 40 * 1000
            steady[bits] = min(steady[bits], ms)
    results = {"checkpoint": args.checkpoint, "blas": active_blas(), "frames": args.frames}
    for bits in VARIANTS:
        results[f"{bits or 32}-bit"] = _compare(
            codes[None], codes[bits], audio[None], audio[bits], services[bits], steady[bits]
        )
    _print(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


def _compare(float_codes, codes, float_audio, audio, service, steady_ms) -> dict:
    same = [
        [np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True)]
        for ours, theirs in zip(codes, float_codes, strict=True)
    ]
    first_differing = [flags.index(False) if False in flags else None for flags in same]
    noise = np.sum((audio - float_audio) ** 2)
    snr = math.inf if noise == 0 else 10 * np.log10(np.sum(float_audio**2) / noise)
    total = sum(len(flags) for flags in same)
    return {
        "frames_equal_to_float_percent": round(100 * sum(map(sum, same)) / total, 1),
        "first_differing_frame_per_text": first_differing,
        "audio_snr_vs_float_db": round(float(snr), 1),
        "transformer_weight_mib": round(_transformer_bytes(service._model) / 2**20, 1),
        "steady_ms_per_frame": round(steady_ms, 1),
        "backend": service.backend,
    }


def _print(results: dict) -> None:
    print(
        f"checkpoint {results['checkpoint']}; BLAS {results['blas']}; "
        f"{results['frames']} greedy frames per text, {len(TEXTS)} texts"
    )
    print(
        "| weights | frames equal to float | first differing frame per text "
        "| audio SNR vs float (dB) | transformer weights (MiB) | steady ms/frame "
        "| backend |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in ("32-bit", "8-bit", "4-bit"):
        row = results[name]
        print(
            f"| {name} | {row['frames_equal_to_float_percent']}% "
            f"| {row['first_differing_frame_per_text']} | {row['audio_snr_vs_float_db']} "
            f"| {row['transformer_weight_mib']} | {row['steady_ms_per_frame']} "
            f"| {row['backend']} |"
        )


if __name__ == "__main__":
    main()
