"""MOSS-TTS-Nano side by side in one process: mlx-audio 0.6.2 ``generate()``
against our buffered ``speak`` and our ``stream``, on the same checkpoint,
text, reference clip and greedy decoding.

    python bench/bench_nano.py CHECKPOINT [--frames 40] [--steady 20 60] [--json out.json]
    python bench/bench_nano.py CHECKPOINT --with-chat-model [--chat-bits 4] [--requests 6]

Reports steady ms/frame (from two lengths, so prefill and fixed costs cancel),
time to first audio (new reference, then the same reference again: cached),
total time, real-time factor, peak memory (each side's resident weights and
caches, ours with what the host step keeps: its panels and scratch; plus the
most its run held above them, in MLX's allocator plus numpy's host buffers),
the backend, the BLAS and the ratios.
``--backend`` picks what runs our side (default: ``MLX_SPEECH_BACKEND``, else
auto: the host engine where it can run, else MLX alone).
Each time is the best of --repeats runs, theirs and ours taking turns, so the
drift of a shared machine reaches both alike.
On Linux it runs MLX on the system OpenBLAS when one is installed;
pass --reference-blas to measure the bundled reference BLAS instead, and set
MLX_SPEECH_EXACT=1 to measure our reference mode (no products of our own for
sampled requests; greedy ones, as here, never take them).
With --with-chat-model it measures our streams alone and beside a chat model
of Llama-3.2-1B's size in the same process instead (``beside_chat``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

TEXT = "Hello there, this is a benchmark of streaming speech on a local machine."


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--frames", type=int, default=40, help="utterance length in frames")
    parser.add_argument(
        "--steady", type=int, nargs=2, default=(20, 60), metavar=("SHORT", "LONG")
    )
    parser.add_argument("--reference-seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument(
        "--reference-blas", action="store_true", help="do not switch to the system OpenBLAS"
    )
    parser.add_argument(
        "--backend",
        default=None,
        choices=("auto", "mlx", "host"),
        help="what runs our side (default: $MLX_SPEECH_BACKEND, else auto)",
    )
    parser.add_argument(
        "--with-chat-model",
        action="store_true",
        help="measure streams alone, beside an idle and a generating chat model",
    )
    parser.add_argument(
        "--chat-bits", type=int, default=4, help="the chat model's quantization (0: float)"
    )
    parser.add_argument(
        "--requests", type=int, default=6, help="with --with-chat-model: per condition"
    )
    return parser.parse_args()


def _reference_clip(seconds: float) -> Path:
    import numpy as np
    import soundfile

    rate = 48000
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(0)
    voice = 0.3 * np.sin(2 * np.pi * 150 * t * (1 + 0.1 * np.sin(3 * t)))
    path = Path(tempfile.mkdtemp()) / "reference.wav"
    soundfile.write(path, voice + 0.01 * rng.standard_normal(t.size), rate)
    return path


def _active_mib() -> float:
    import mlx.core as mx

    return mx.get_active_memory() / 2**20


def _peak_memory(run, resident_mib: float):
    """→ ``run()``, and its peak memory: what its side keeps resident (both
    models live in this process, so MLX's own peak counts the other's too)
    plus the most ``run`` held above what was active before it, in MLX's
    allocator and, added to it, in host buffers (numpy's, traced: the host
    step's and decoder's caches are there)."""
    import tracemalloc

    import mlx.core as mx

    before = mx.get_active_memory()
    mx.reset_peak_memory()
    tracemalloc.start()
    try:
        result = run()
        host_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    held = mx.get_peak_memory() - before + host_peak
    return result, resident_mib + held / 2**20


def _theirs(model, clip: Path, frames: int) -> tuple[float, object]:
    started = time.perf_counter()
    result = next(
        model.generate(TEXT, ref_audio=str(clip), do_sample=False, max_tokens=frames)
    )
    return time.perf_counter() - started, result


def _ours_buffered(tts, voice, frames: int) -> tuple[float, object]:
    started = time.perf_counter()
    audio = tts.speak(TEXT, voice=voice, temperature=0, max_new_tokens=frames)
    return time.perf_counter() - started, audio


def _ours_streamed(tts, voice, frames: int) -> tuple[float, float, int]:
    started = time.perf_counter()
    first, samples = None, 0
    for chunk in tts.stream(TEXT, voice=voice, temperature=0, max_new_tokens=frames):
        first = first if first is not None else time.perf_counter() - started
        samples += len(chunk.samples)
    return first, time.perf_counter() - started, samples


def _timings(args, tts, theirs, clip) -> dict[str, list[float]]:
    """Every timed run, ``--repeats`` rounds of: theirs, ours streamed with a
    clip never seen before and again with it cached, ours buffered, then both
    at the two steady lengths."""
    frames, (short, long) = args.frames, args.steady
    runs: dict[str, list[float]] = {}

    def record(name: str, seconds: float) -> None:
        runs.setdefault(name, []).append(seconds)

    for repeat in range(args.repeats):
        record("their_total", _theirs(theirs, clip, frames)[0])
        new_voice = str(_reference_clip(args.reference_seconds * (1.01 + 0.01 * repeat)))
        first, total, _ = _ours_streamed(tts, new_voice, frames)
        record("ttfa_new", first)
        record("stream_total", total)
        record("ttfa_cached", _ours_streamed(tts, new_voice, frames)[0])
        record("buffered_total", _ours_buffered(tts, clip.read_bytes(), frames)[0])
        for length in (short, long):
            record(f"their_{length}", _theirs(theirs, clip, length)[0])
            record(f"our_{length}", _ours_streamed(tts, clip.read_bytes(), length)[1])
    return runs


def main() -> None:
    args = _arguments()
    if args.reference_blas:
        import mlx.core  # noqa: F401 - first: mlx_speech then leaves MLX on it
    import mlx_speech  # else first: it brings OpenBLAS under MLX

    # isort: split
    import numpy as np
    from mlx_audio.tts.utils import load_model

    from mlx_speech.host_engine.blas import active_blas
    from mlx_speech.host_engine.frame_step import HostStep

    blas = active_blas()
    if args.with_chat_model:
        _beside_chat(args, mlx_speech.load(args.checkpoint, backend=args.backend), blas)
        return
    empty = _active_mib()
    tts = mlx_speech.load(args.checkpoint, backend=args.backend)
    ours_loaded = _active_mib()
    theirs = load_model(Path(args.checkpoint))
    clip = _reference_clip(args.reference_seconds)
    frames, rate = args.frames, tts.sample_rate
    _theirs(theirs, clip, 2)  # warm both up (codec load, kernels)
    theirs_warm = _active_mib()
    _ours_buffered(tts, clip.read_bytes(), 2)
    # and what our host step keeps outside MLX: panels (a copy of some
    # weights) and the scratch its load's warm-up grew
    stepper = tts._service._batch._stepper
    host = stepper if isinstance(stepper, HostStep) else None
    held = 0 if host is None else host.held_bytes / 2**20
    our_resident = ours_loaded - empty + _active_mib() - theirs_warm + held
    their_resident = theirs_warm - ours_loaded

    (_, their_result), their_memory = _peak_memory(
        lambda: _theirs(theirs, clip, frames), their_resident
    )
    their_audio = np.asarray(their_result.audio, dtype=np.float32).mean(axis=1)
    (_, _, stream_samples), our_memory = _peak_memory(
        lambda: _ours_streamed(tts, str(_reference_clip(args.reference_seconds)), frames),
        our_resident,
    )
    _, our_audio = _ours_buffered(tts, clip.read_bytes(), frames)
    audio_seconds = len(our_audio.samples) / rate
    difference = (
        float(np.abs(our_audio.samples - their_audio).max())
        if their_audio.shape == our_audio.samples.shape
        else None
    )
    runs = _timings(args, tts, theirs, clip)
    best = {name: min(seconds) for name, seconds in runs.items()}
    their_total, buffered_total = best["their_total"], best["buffered_total"]
    ttfa_new, ttfa_cached = best["ttfa_new"], best["ttfa_cached"]
    stream_total = best["stream_total"]
    short, long = args.steady
    their_steady = (best[f"their_{long}"] - best[f"their_{short}"]) / (long - short) * 1000
    our_steady = (best[f"our_{long}"] - best[f"our_{short}"]) / (long - short) * 1000

    results = {
        "checkpoint": args.checkpoint,
        "backend": tts.backend,
        "blas": blas,
        "frame_step": (
            "MLX"
            if host is None
            else "host, own products when sampling"
            if host.own_for_sampling
            else "host, MLX's numbers"
        ),
        "frames": frames,
        "repeats": args.repeats,
        "audio_seconds": round(audio_seconds, 3),
        "mlx_audio": {
            "steady_ms_per_frame": round(their_steady, 1),
            "time_to_audio_s": round(their_total, 3),
            "total_s": round(their_total, 3),
            "rtf": round(their_total / audio_seconds, 3),
            "peak_memory_mib": round(their_memory),
            "resident_memory_mib": round(their_resident),
        },
        "ours_buffered": {
            "total_s": round(buffered_total, 3),
            "rtf": round(buffered_total / audio_seconds, 3),
        },
        "ours_stream": {
            "steady_ms_per_frame": round(our_steady, 1),
            "time_to_first_audio_new_reference_s": round(ttfa_new, 3),
            "time_to_first_audio_cached_reference_s": round(ttfa_cached, 3),
            "total_s": round(stream_total, 3),
            "rtf": round(stream_total / (stream_samples / rate), 3),
            "peak_memory_mib": round(our_memory),
            "resident_memory_mib": round(our_resident),
        },
        "ratios": {
            "steady_ms_per_frame_ours_over_mlx_audio": round(our_steady / their_steady, 3),
            "first_audio_ours_over_mlx_audio_time_to_audio": round(
                ttfa_new / their_total, 4
            ),
            "buffered_total_ours_over_mlx_audio": round(buffered_total / their_total, 3),
            "peak_memory_ours_stream_over_mlx_audio": round(our_memory / their_memory, 3),
        },
        "max_abs_audio_difference_buffered_vs_mlx_audio": difference,
    }
    _print_table(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


def _beside_chat(args, tts, blas: str) -> None:
    import beside_chat

    bits = args.chat_bits or None
    results = beside_chat.run(tts, args.requests, args.frames, bits)
    print(
        f"checkpoint {args.checkpoint}; backend {tts.backend}; BLAS {blas}; "
        f"{args.requests} streamed requests of {args.frames} frames per condition, "
        f"greedy; chat model: Llama-3.2-1B dimensions, "
        f"{f'{bits}-bit' if bits else 'float32'}"
    )
    beside_chat.print_table(results)
    if args.json:
        record = {"checkpoint": args.checkpoint, "backend": tts.backend, "blas": blas}
        record |= {"frames": args.frames, "requests": args.requests, "chat_bits": bits}
        record |= {"conditions": results}
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n")


def _print_table(r: dict) -> None:
    theirs, stream, buffered = r["mlx_audio"], r["ours_stream"], r["ours_buffered"]
    print(
        f"checkpoint {r['checkpoint']}; backend {r['backend']}; BLAS {r['blas']}; "
        f"frame step: "
        f"{r['frame_step']}; {r['frames']} frames = {r['audio_seconds']} s "
        "of audio; greedy; cloning a new reference"
    )
    rows = [
        (
            "steady ms/frame",
            theirs["steady_ms_per_frame"],
            "-",
            stream["steady_ms_per_frame"],
        ),
        (
            "time to first audio (s)",
            theirs["time_to_audio_s"],
            buffered["total_s"],
            f"{stream['time_to_first_audio_new_reference_s']} "
            f"(cached ref {stream['time_to_first_audio_cached_reference_s']})",
        ),
        ("total (s)", theirs["total_s"], buffered["total_s"], stream["total_s"]),
        ("real-time factor", theirs["rtf"], buffered["rtf"], stream["rtf"]),
        (
            "peak memory, MLX + host (MiB)",
            theirs["peak_memory_mib"],
            "-",
            stream["peak_memory_mib"],
        ),
    ]
    header = ("", "mlx-audio generate()", "ours speak", "ours stream")
    print(f"| {header[0]:24} | {header[1]:>20} | {header[2]:>10} | {header[3]:>28} |")
    print(f"|{'-' * 26}|{'-' * 22}|{'-' * 12}|{'-' * 30}|")
    for name, a, b, c in rows:
        print(f"| {name:24} | {a!s:>20} | {b!s:>10} | {c!s:>28} |")
    for name, value in r["ratios"].items():
        print(f"{name}: {value}")
    print(
        f"max |audio difference| ours buffered vs mlx-audio: "
        f"{r['max_abs_audio_difference_buffered_vs_mlx_audio']}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
