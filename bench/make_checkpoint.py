"""Build a random-weight MOSS-TTS-Nano checkpoint in the real on-disk layout.

    python bench/make_checkpoint.py DIR [--size tiny|full] [--seed N]

``full`` has MOSS-TTS-Nano-100M dimensions and a Nano-class codec; the text
head is biased so the model speaks until the frame budget.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before MLX and the model code load: the command's time

# isort: split
import argparse  # noqa: E402

from mlx_speech.testing.nano_checkpoint import SIZES, build_nano_checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    build_nano_checkpoint(args.directory, size=SIZES[args.size], seed=args.seed)
    seconds = time.perf_counter() - STARTED
    print(f"built a {args.size} checkpoint in {args.directory} ({seconds:.1f} s)")


if __name__ == "__main__":
    main()
