"""MOSS-TTS-Nano through MLX on whatever device MLX runs on here, beside
mlx-audio 0.6.2 in the same process: the check to run on a GPU.

    python bench/gpu_check.py CHECKPOINT [--frames 40] [--steady 20 60]
        [--concurrency 8] [--repeats 2] [--json out.json]

MLX's CUDA backend runs the same code a Mac runs on Metal. On a Linux
machine with an NVIDIA GPU, install ``mlx[cuda12]==0.32.4`` (or the
``mlx-cuda-13`` wheel) beside mlx-speech; this script then runs on the GPU,
as MLX's default device is. Without one it runs on the CPU, through the
system OpenBLAS where there is one (CI runs it on the tests' tiny checkpoint
so it never rots). It reports, and writes as JSON:

- the device (MLX's ``device_info``, and the NVIDIA card and driver where
  ``nvidia-smi`` answers) and the MLX version;
- parity: our greedy and seeded codes against mlx-audio's
  ``generate_audio_token_ids`` (equal, or the first frame that differs), our
  greedy audio against its ``generate()`` (largest difference, SNR);
- codes alone against the same request stepped beside seven others;
- steady ms per frame, ours streamed against mlx-audio's ``generate()``
  (from two lengths, so fixed costs cancel), best of ``--repeats`` in turn;
- first audio (default voice, its prompt prefix cached) and the real-time
  factor of one stream;
- audio seconds per second of one stream and of ``--concurrency`` at once;
- the most MLX memory each side's stream took above what was resident
  (both models' weights);
- the primitives and host syncs of a frame step, and the ms the host takes
  to build one (``graph_cost``), and those of a streamed request's frame,
  its decoding included (``streamed_cost``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mlx_speech  # before MLX: on Linux, MLX's CPU products through OpenBLAS

# isort: split
import mlx.core as mx
import numpy as np

TEXT = "Hello there, this is a benchmark of streaming speech on a local machine."
OTHER_TEXTS = (
    "A second request, stepped beside the first.",
    "Numbers like 42 and 7 are read out as words.",
    "你好，欢迎使用语音合成服务。",
    "Short.",
    "The fifth request has a somewhat longer sentence to say.",
    "Six.",
    "And the last of the eight requests ends the batch.",
)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--frames", type=int, default=40, help="frames of each check")
    parser.add_argument(
        "--steady", type=int, nargs=2, default=(20, 60), metavar=("SHORT", "LONG")
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the results here")
    return parser.parse_args()


def device() -> dict:
    """MLX's device, and the NVIDIA card and driver where there is one."""
    info = {
        "mlx": mx.__version__,
        "default_device": str(mx.default_device()),
        **{key: str(value) for key, value in mx.device_info().items()},
    }
    if shutil.which("nvidia-smi"):
        query = "--query-gpu=name,driver_version,memory.total"
        answer = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        info["nvidia_smi"] = answer.stdout.strip() or answer.stderr.strip()
    return info


def _sampling(greedy: bool, frames: int):
    from mlx_speech.families.moss_nano.loop import FrameSampling
    from mlx_speech.families.moss_nano.sampling import GREEDY_HEAD, HeadSampler
    from mlx_speech.families.moss_nano.service import TEXT_HEAD

    return FrameSampling(
        text=GREEDY_HEAD if greedy else TEXT_HEAD,
        audio=GREEDY_HEAD if greedy else HeadSampler(0.8, 25, 0.95),
        repetition_penalty=1.2,
        max_frames=frames,
    )


def _prompt(model, text: str) -> mx.array:
    return model.build_inference_input_ids(
        text=text, tokenizer=model.tokenizer, mode="continuation"
    )[0]


def _first_difference(ours: np.ndarray, theirs: np.ndarray) -> dict:
    same = ours.shape == theirs.shape and np.array_equal(ours, theirs)
    if same:
        return {"equal": True, "frames": len(ours)}
    rows = min(len(ours), len(theirs))
    differing = [i for i in range(rows) if not np.array_equal(ours[i], theirs[i])]
    first = differing[0] if differing else rows
    return {"equal": False, "frames": [len(ours), len(theirs)], "first_differing": first}


def code_parity(model, frames: int, seed: int = 11) -> dict:
    """Our frame loop's codes against mlx-audio's, greedy and seeded."""
    from mlx_speech.families.moss_nano.loop import frames as our_frames
    from mlx_speech.families.moss_nano.sampling import KeySequence

    prompt = _prompt(model, TEXT)
    results = {}
    for name, greedy in (("greedy", True), ("seeded", False)):
        found = list(
            our_frames(model, prompt, _sampling(greedy, frames), KeySequence(seed))
        )
        ours = np.stack([np.asarray(frame) for frame in found])
        mx.random.seed(seed)
        theirs = model.generate_audio_token_ids(
            prompt_input_ids=prompt, max_new_frames=frames, do_sample=not greedy
        )
        results[name] = _first_difference(ours, np.asarray(theirs[0]))
    return results


def audio_parity(tts, theirs, frames: int) -> dict:
    ours = tts.speak(TEXT, temperature=0, max_new_tokens=frames).samples.astype(np.float64)
    result = next(
        theirs.generate(TEXT, mode="continuation", do_sample=False, max_tokens=frames)
    )
    reference = np.asarray(result.audio, dtype=np.float64).mean(axis=1)
    if ours.shape != reference.shape:
        return {"equal_length": False, "samples": [len(ours), len(reference)]}
    noise = float(np.sum((ours - reference) ** 2))
    signal = float(np.sum(reference**2))
    return {
        "equal_length": True,
        "max_abs_difference": float(np.max(np.abs(ours - reference), initial=0.0)),
        "snr_db": None if noise == 0 else round(10 * np.log10(signal / noise), 1),
    }


def alone_and_batched(model, frames: int) -> dict:
    """A greedy request's codes stepped alone, and beside seven others."""
    from mlx_speech.families.moss_nano.loop import FrameJob, MlxFrameStep
    from mlx_speech.families.moss_nano.sampling import KeySequence

    stepper = MlxFrameStep(model)

    def codes_of_first(texts) -> np.ndarray:
        jobs = [
            FrameJob(model, _prompt(model, text), _sampling(True, frames), KeySequence(0))
            for text in texts
        ]
        made = []
        while not jobs[0].done:
            stepper.step([job for job in jobs if not job.done])
            if jobs[0].frame is not None:
                made.append(np.asarray(jobs[0].frame))
        return np.stack(made)

    alone = codes_of_first([TEXT])
    together = codes_of_first([TEXT, *OTHER_TEXTS])
    return _first_difference(alone, together)


def _streamed(tts, frames: int) -> tuple[float, float, int]:
    """→ seconds to the first chunk, seconds in all, samples."""
    started = time.perf_counter()
    first, samples = None, 0
    for chunk in tts.stream(TEXT, temperature=0, max_new_tokens=frames):
        first = first if first is not None else time.perf_counter() - started
        samples += len(chunk.samples)
    return first, time.perf_counter() - started, samples


def _theirs_seconds(theirs, frames: int) -> float:
    started = time.perf_counter()
    next(theirs.generate(TEXT, mode="continuation", do_sample=False, max_tokens=frames))
    return time.perf_counter() - started


def speed(tts, theirs, args) -> dict:
    """Steady ms per frame (ours streamed, theirs generated, in turn), first
    audio and the real-time factor of one stream; the best of each."""
    short, long = args.steady
    runs: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for length in (short, long):
            runs.setdefault(f"theirs_{length}", []).append(_theirs_seconds(theirs, length))
            runs.setdefault(f"ours_{length}", []).append(_streamed(tts, length)[1])
        first, total, samples = _streamed(tts, args.frames)
        runs.setdefault("first_audio", []).append(first)
        runs.setdefault("rtf", []).append(total / (samples / tts.sample_rate))
    best = {name: min(values) for name, values in runs.items()}
    ours = (best[f"ours_{long}"] - best[f"ours_{short}"]) / (long - short) * 1000
    theirs_ms = (best[f"theirs_{long}"] - best[f"theirs_{short}"]) / (long - short) * 1000
    return {
        "steady_ms_per_frame_ours": round(ours, 2),
        "steady_ms_per_frame_mlx_audio": round(theirs_ms, 2),
        "steady_ratio": round(ours / theirs_ms, 3),
        "first_audio_s": round(best["first_audio"], 4),
        "rtf_one_stream": round(best["rtf"], 3),
    }


def concurrency(tts, streams: int, frames: int) -> dict:
    """Audio seconds per wall second with ``streams`` streams at once."""

    def one(_) -> int:
        return _streamed(tts, frames)[2]

    started = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        samples = sum(pool.map(one, range(streams)))
    seconds = samples / tts.sample_rate
    return {
        "streams": streams,
        "audio_s_per_s": round(seconds / (time.perf_counter() - started), 3),
    }


def _memory_taken(run) -> float:
    """MiB of MLX memory ``run`` took at its peak above what was resident."""
    mx.clear_cache()
    resident = mx.get_active_memory()
    mx.reset_peak_memory()
    run()
    return round((mx.get_peak_memory() - resident) / 2**20, 1)


def frame_cost(model, frames: int = 4) -> dict:
    """Primitives evaluated and host syncs per greedy frame, alone, and the
    median ms the host takes to build a frame before queuing it (on a GPU,
    the device idles if building outlasts its computing the codes)."""
    import statistics

    from graph_cost import BuildTime, GraphCost

    from mlx_speech.families.moss_nano.loop import FrameJob, MlxFrameStep
    from mlx_speech.families.moss_nano.sampling import KeySequence

    stepper = MlxFrameStep(model)
    job = FrameJob(model, _prompt(model, TEXT), _sampling(True, 10**6), KeySequence(0))
    stepper.step([job])
    mx.eval(job.inputs, job.history.seen)
    with GraphCost() as cost:
        for _ in range(frames):
            stepper.step([job])
        mx.eval(job.inputs, job.history.seen)
    with BuildTime() as build:
        for _ in range(frames):
            build.start()
            stepper.step([job])
    mx.eval(job.inputs, job.history.seen)
    return {
        "primitives": round(cost.primitives / frames),
        "computing": round(cost.computing / frames),
        "syncs": round((cost.syncs - 1) / frames, 2),
        "host_build_ms": round(statistics.median(build.seconds) * 1000, 2),
    }


def streamed_frame_cost(tts) -> dict:
    """Kernels (computing primitives) and host syncs per frame of a streamed
    greedy request's frames 8 to 40, its chunks' decoding included
    (``kernel_count``'s row; on a GPU, of the graph it runs)."""
    from streamed_cost import streamed_frame_cost as of_service

    return of_service(tts._service, TEXT)


def main() -> None:
    args = _arguments()
    from mlx_audio.tts.utils import load_model

    from mlx_speech.host_engine.blas import active_blas

    tts = mlx_speech.load(args.checkpoint, backend="mlx")
    theirs = load_model(Path(args.checkpoint))
    model = tts._service._model
    results = {
        "checkpoint": args.checkpoint,
        "device": device(),
        "backend": tts.backend,
        "blas": active_blas() if mx.default_device() == mx.cpu else None,
        "code_parity": code_parity(model, args.frames),
        "audio_parity": audio_parity(tts, theirs, args.frames),
        "alone_vs_batched": alone_and_batched(model, args.frames),
        "frame_cost": frame_cost(model),
        "streamed_frame_cost": streamed_frame_cost(tts),
    }
    _streamed(tts, args.frames)  # warm: the prompt prefix is cached
    results["speed"] = speed(tts, theirs, args)
    results["memory_above_resident_mib"] = {
        "ours": _memory_taken(lambda: _streamed(tts, args.frames)),
        "mlx_audio": _memory_taken(lambda: _theirs_seconds(theirs, args.frames)),
    }
    results["one_stream"] = concurrency(tts, 1, args.frames)
    results["many_streams"] = concurrency(tts, args.concurrency, args.frames)
    many, one = results["many_streams"], results["one_stream"]
    results["many_over_one"] = round(many["audio_s_per_s"] / one["audio_s_per_s"], 2)
    print(json.dumps(results, indent=1, ensure_ascii=False))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
