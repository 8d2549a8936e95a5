"""Soak a running mlx-speech server: many requests, its memory sampled.

    python bench/soak.py --pid PID [--url http://127.0.0.1:8000]
        [--requests 500] [--concurrency 8] [--rounds 10] [--json out.json]

The requests (bench_serve's, read as streams) go in rounds; after each round
the server's resident memory (RSS, from /proc/PID/status) is read. The first
round is the warm-up (kernels, caches); growth is measured from its end to
the last round's. Prints failures and RSS per round, and the growth.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench_serve import run_level


def resident_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pid", type=int, required=True, help="the server's process")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    body = {"response_format": "pcm", "max_new_tokens": args.max_new_tokens, "seed": 1}
    per_round = max(1, args.requests // args.rounds)
    rounds = []
    start = resident_mib(args.pid)
    for index in range(args.rounds):
        level = run_level(args.url, args.concurrency, per_round, body)
        rounds.append(
            {
                "round": index,
                "requests": level["requests"],
                "failures": level["failures"],
                "failure_examples": level["failure_examples"],
                "rss_mib": round(resident_mib(args.pid), 1),
            }
        )
        print(json.dumps(rounds[-1]))
    warm, end = rounds[0]["rss_mib"], rounds[-1]["rss_mib"]
    summary = {
        "requests": sum(r["requests"] for r in rounds),
        "failures": sum(r["failures"] for r in rounds),
        "concurrency": args.concurrency,
        "rss_start_mib": round(start, 1),
        "rss_after_warm_up_mib": warm,
        "rss_end_mib": end,
        "growth_after_warm_up_percent": round(100 * (end - warm) / warm, 2),
        "rounds": rounds,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
