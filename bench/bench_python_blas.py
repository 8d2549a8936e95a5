"""The Python API's speed on Linux without LD_PRELOAD, beside the command's.

    python bench/bench_python_blas.py CHECKPOINT [--frames 40] [--json FILE]

Each run is a fresh process with no ``LD_PRELOAD``, speaking one text
(seeded, to a fixed number of frames) after loading the checkpoint:

- ``speak``: ``mlx-speech speak``, as a user runs it;
- ``python``: ``import mlx_speech`` first, then ``mlx_speech.load`` and
  ``tts.speak`` (OpenBLAS is brought under MLX by the import);
- ``python, mlx first``: MLX imported before mlx_speech (as a chat model's
  code might), which leaves MLX on the mlx-cpu wheel's reference BLAS: how
  the Python API ran before the import brought OpenBLAS.

It prints each run's load time, first audio, real-time factor (generation
time / audio time) and BLAS, and the real-time factors' ratio to ``speak``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

TEXT = "Hello there, this is a benchmark of speech from the Python interface."

PYTHON_RUN = """
import json, sys, time
if sys.argv[4] == "mlx first":
    import mlx.core
import mlx_speech
from mlx_speech.backends import blas_name
started = time.perf_counter()
tts = mlx_speech.load(sys.argv[1], backend=sys.argv[5])
loaded = time.perf_counter()
first = None
samples = 0
for chunk in tts.stream(sys.argv[2], seed=0, max_new_tokens=int(sys.argv[3])):
    first = first or time.perf_counter() - loaded
    samples += len(chunk.samples)
total = time.perf_counter() - loaded
print(json.dumps({"load_s": loaded - started, "first_audio_s": first,
                  "rtf": total / (samples / tts.sample_rate), "blas": blas_name()}))
"""

_SPEAK_SUMMARY = re.compile(
    r"model loaded in (?P<load>[\d.]+) s; then first audio (?P<first>\d+) ms .*"
    r"real-time factor (?P<rtf>[\d.]+)"
)


def _environment() -> dict:
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def _speak(checkpoint: str, frames: int, backend: str) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            sys.executable,
            "-m",
            "mlx_speech.cli",
            "speak",
            TEXT,
            "--model",
            checkpoint,
            "--seed",
            "0",
            "--max-new-tokens",
            str(frames),
            "--backend",
            backend,
            "-o",
            f"{scratch}/out.wav",
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, env=_environment(), check=True
        )
    summary = _SPEAK_SUMMARY.search(done.stdout)
    blas = re.search(r"BLAS: (.*)", done.stdout)
    return {
        "load_s": float(summary["load"]),
        "first_audio_s": int(summary["first"]) / 1000,
        "rtf": float(summary["rtf"]),
        "blas": blas[1] if blas else "n/a",
    }


def _python(checkpoint: str, frames: int, backend: str, order: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PYTHON_RUN, checkpoint, TEXT, str(frames), order, backend],
        capture_output=True,
        text=True,
        env=_environment(),
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--backend", default="auto", choices=("auto", "mlx", "host"))
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    runs = {
        "speak": _speak(args.checkpoint, args.frames, args.backend),
        "python": _python(args.checkpoint, args.frames, args.backend, "mlx_speech first"),
        "python, mlx first": _python(
            args.checkpoint, args.frames, args.backend, "mlx first"
        ),
    }
    for run in runs.values():
        run["rtf_to_speak"] = run["rtf"] / runs["speak"]["rtf"]
    print(f"{'run':<20}{'load s':>8}{'first s':>9}{'RTF':>7}{'/ speak':>9}  BLAS")
    for name, run in runs.items():
        print(
            f"{name:<20}{run['load_s']:>8.1f}{run['first_audio_s']:>9.2f}"
            f"{run['rtf']:>7.2f}{run['rtf_to_speak']:>9.2f}  {run['blas']}"
        )
    if args.json:
        results = {"checkpoint": args.checkpoint, "frames": args.frames, "runs": runs}
        results["backend"] = args.backend
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)


if __name__ == "__main__":
    main()
