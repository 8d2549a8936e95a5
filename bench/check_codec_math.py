"""How far the fast codec math is from the exact one, and what it saves.

    python bench/check_codec_math.py [CHECKPOINT] [--chunks 12] [--fit] [--backend mlx|host]

Always: the largest error of the fast ``erf`` (float32, over [-6, 6]) and the
largest relative error of the fast ``exp`` (over [-87, 0]), against float64.
With a checkpoint: its model speaks the bench texts greedily, and the codec
decodes those codes in 16-frame chunks (as a stream does) with the exact and
the fast functions, taking turns; prints ms/frame of each (best of 3) and the
fast audio's largest difference and SNR against the exact audio. With
``--backend host`` (the default; Linux's CPU, the C library), the MLX decoder
takes the host engine's GELU and attention where they pass their checks; and
where the engine's host decoder applies, the same for its exact and fast
attention, the decoder the service runs, and the time of eight streams
decoding their first 40 frames together in a stream's chunks (1, 1, 1, 1, 2,
…), as eight requests started together do. ``--backend mlx``: MLX's own
functions alone.
``--fit`` recomputes the erf coefficients (a rational least-squares fit,
reweighted so the error, not the residual times Q, is what shrinks).
On Linux it runs MLX on the system OpenBLAS when one is installed.
"""

from __future__ import annotations

import argparse
import math
import time
from functools import partial
from pathlib import Path

import numpy as np

TEXTS = (
    "Hello there, this is a benchmark of streaming speech on a local machine.",
    "The quick brown fox jumps over the lazy dog, and then it runs away.",
    "你好，欢迎使用语音合成服务。这是第二句话！",
)
CHUNK = 16


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?")
    parser.add_argument("--chunks", type=int, default=12, help="16-frame chunks per text")
    parser.add_argument("--fit", action="store_true")
    parser.add_argument(
        "--backend",
        default="host",
        choices=("mlx", "host"),
        help="with a checkpoint: MLX alone, or beside the host engine (default)",
    )
    return parser.parse_args()


def fit_erf(numerator_terms: int = 7, denominator_degree: int = 5) -> tuple[list, list]:
    """erf(x)/x ≈ P(x²)/Q(x²) with Q(0) = 1, on (0, 4]: linearized least
    squares, each pass weighted by 1/|Q| of the last."""
    x = np.linspace(1e-4, 4.0, 40000)
    squared = x * x
    target = np.array([math.erf(v) for v in x]) / x
    weights = np.ones_like(x)
    for _ in range(8):
        powers = np.vander(
            squared, max(numerator_terms, denominator_degree + 1), increasing=True
        )
        columns = np.hstack(
            [
                powers[:, :numerator_terms],
                -target[:, None] * powers[:, 1 : denominator_degree + 1],
            ]
        )
        scale = (weights * x)[:, None]
        solution, *_ = np.linalg.lstsq(columns * scale, target * scale[:, 0], rcond=None)
        numerator = solution[:numerator_terms]
        denominator = np.concatenate([[1.0], solution[numerator_terms:]])
        weights = 1 / np.abs(np.polynomial.polynomial.polyval(squared, denominator))
    return numerator.tolist(), denominator.tolist()


def function_errors() -> tuple[float, float]:
    import mlx.core as mx

    from mlx_speech.families.moss_nano.codec_math import polynomial_exp, rational_erf

    x = np.linspace(-6, 6, 400001, dtype=np.float32)
    erf = np.array([math.erf(v) for v in x.astype(np.float64)])
    erf_error = np.abs(np.asarray(rational_erf(mx.array(x)), dtype=np.float64) - erf).max()
    y = np.linspace(-87, 0, 400001, dtype=np.float32)
    exact = np.exp(y.astype(np.float64))
    fast = np.asarray(polynomial_exp(mx.array(y)), dtype=np.float64)
    return float(erf_error), float((np.abs(fast - exact) / exact).max())


def _bench_codes(service, chunks: int) -> list[list]:
    """Per text, the greedy codes of ``chunks`` chunks (as MLX arrays)."""
    from dataclasses import replace

    from mlx_speech.families.moss_nano.loop import frames
    from mlx_speech.families.moss_nano.sampling import KeySequence
    from mlx_speech.families.moss_nano.service import DEFAULTS, _frame_sampling

    model = service._model
    budget = chunks * CHUNK
    sampling = _frame_sampling(replace(DEFAULTS, temperature=0.0, max_new_tokens=budget))
    codes = []
    for text in TEXTS:
        prompt, _ = model.build_inference_input_ids(
            text=text, tokenizer=model.tokenizer, mode="continuation"
        )
        codes.append(list(frames(model, prompt, sampling, KeySequence(0))))
    return codes


def _decode(codec, n_vq, frames, numerics) -> tuple[np.ndarray, float]:
    """The audio of ``frames`` decoded chunk by chunk, and seconds taken."""
    import mlx.core as mx

    from mlx_speech.families.moss_nano.codec import DecoderState, decode_together

    state = DecoderState(codec)
    pieces = []
    started = time.perf_counter()
    for start in range(0, len(frames), CHUNK):
        audio = decode_together(
            codec, n_vq, [(state, frames[start : start + CHUNK])], numerics
        )
        mx.eval(audio)
        pieces.append(np.asarray(audio[0], dtype=np.float64))
    return np.concatenate(pieces), time.perf_counter() - started


def _host_decode(decoder, frames) -> tuple[np.ndarray, float]:
    """``_decode`` on the host decoder."""
    state = decoder.state()
    pieces = []
    started = time.perf_counter()
    for start in range(0, len(frames), CHUNK):
        (audio,) = decoder.decode_together([(state, frames[start : start + CHUNK])])
        pieces.append(audio.astype(np.float64))
    return np.concatenate(pieces), time.perf_counter() - started


def compare_decodes(checkpoint: Path, chunks: int, backend: str) -> dict:
    from mlx_speech.backends import accelerator_for
    from mlx_speech.families import LoadOptions
    from mlx_speech.families.moss_nano.codec_math import codec_math
    from mlx_speech.families.moss_nano.service import FAMILY, load

    accelerator, _ = accelerator_for(backend, FAMILY)
    service = load(checkpoint, LoadOptions(accelerator=accelerator))
    codec, n_vq = service._codec, service._model.config.n_vq
    codes = _bench_codes(service, chunks)
    result = {"frames": sum(len(c) for c in codes), "backend": service.backend}
    mlx_decoders = {
        name: partial(_decode, codec, n_vq, numerics=codec_math(service._ops, fast))
        for name, fast in (("exact", False), ("fast", True))
    }
    result["mlx"] = _compared(mlx_decoders, codes, result["frames"])
    if accelerator is None:
        return result
    hosts = {
        name: accelerator.codec_decoder(codec, n_vq, fast=name == "fast")
        for name in mlx_decoders
    }
    if all(hosts.values()):
        host_decoders = {name: partial(_host_decode, host) for name, host in hosts.items()}
        result["host"] = _compared(host_decoders, codes, result["frames"])
        result["host_eight_streams_ms_per_stream_frame"] = _eight_streams(hosts, codes)
    return result


def _eight_streams(hosts: dict, codes: list[list], frames: int = 40) -> dict:
    """Per mode, ms per stream-frame (best of 3, taking turns) of eight
    streams (the bench texts in turn) decoding their first ``frames`` frames
    together, chunked as a stream is."""
    from mlx_speech.families.chunk_schedule import ChunkSchedule

    schedule, plan = ChunkSchedule(), []
    while sum(plan) < frames:
        plan.append(min(schedule.frames_for_next_chunk(), frames - sum(plan)))
        schedule.chunk_done(plan[-1])
    streams = [codes[index % len(codes)][:frames] for index in range(8)]
    best = {name: math.inf for name in hosts}
    for _ in range(3):
        for name, decoder in hosts.items():
            states = [decoder.state() for _ in streams]
            started, at = time.perf_counter(), 0
            for size in plan:
                pairs = zip(states, streams, strict=True)
                decoder.decode_together(
                    [(state, stream[at : at + size]) for state, stream in pairs]
                )
                at += size
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: seconds / (8 * frames) * 1000 for name, seconds in best.items()}


def _compared(decoders: dict, codes: list[list], frames: int) -> dict:
    """Each decoder (``exact``, ``fast``) over every text's codes, taking
    turns: ms/frame (best of 3) and the fast audio against the exact."""
    best = {"exact": math.inf, "fast": math.inf}
    audio = {}
    for _ in range(3):
        for name, decode in decoders.items():
            decoded = [decode(c) for c in codes]
            best[name] = min(best[name], sum(seconds for _, seconds in decoded))
            audio[name] = [samples for samples, _ in decoded]
    exact, fast = np.concatenate(audio["exact"]), np.concatenate(audio["fast"])
    noise = np.sum((fast - exact) ** 2)
    return {
        "exact_ms_per_frame": best["exact"] / frames * 1000,
        "fast_ms_per_frame": best["fast"] / frames * 1000,
        "max_abs_difference": float(np.abs(fast - exact).max()),
        "snr_db": math.inf
        if noise == 0
        else float(10 * np.log10(np.sum(exact**2) / noise)),
    }


def main() -> None:
    args = _arguments()
    from mlx_speech.host_engine.blas import active_blas  # OpenBLAS under MLX

    if args.fit:
        numerator, denominator = fit_erf()
        print("erf numerator (in x², from x⁰):", numerator)
        print("erf denominator:", denominator)
    erf_error, exp_error = function_errors()
    print(
        f"fast erf: max error {erf_error:.2e}; fast exp: max relative error {exp_error:.2e}"
    )
    if args.checkpoint:
        result = compare_decodes(Path(args.checkpoint), args.chunks, args.backend)
        print(
            f"backend: {result['backend']}; BLAS: {active_blas()}; "
            f"{result['frames']} frames in {CHUNK}-frame chunks"
        )
        for decoder in ("mlx", "host"):
            if decoder in result:
                _report(decoder, result[decoder])
        if "host" in result:
            eight = result["host_eight_streams_ms_per_stream_frame"]
            print(
                f"host decoder, eight streams' first 40 frames, ms per stream-frame: "
                f"exact {eight['exact']:.2f}, fast {eight['fast']:.2f}"
            )


def _report(decoder: str, result: dict) -> None:
    print(
        f"{decoder} decoder, ms/frame: exact {result['exact_ms_per_frame']:.2f}, "
        f"fast {result['fast_ms_per_frame']:.2f} "
        f"({result['fast_ms_per_frame'] / result['exact_ms_per_frame']:.2f}x); "
        f"fast audio vs exact: max abs difference {result['max_abs_difference']:.2e}, "
        f"SNR {result['snr_db']:.1f} dB"
    )


if __name__ == "__main__":
    main()
