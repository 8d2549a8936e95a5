"""Load an mlx-speech server with streaming requests.

    python bench/bench_serve.py [--url http://127.0.0.1:8000] [--requests 16]
        [--concurrency 1 2 4 8] [--max-new-tokens 40] [--clone] [--json out.json]
    python bench/bench_serve.py --cold CHECKPOINT [--serve-arg=--max-batch=8] ...

For each concurrency, N requests (English and Chinese sentences) are read as
streams, that many at a time. Per request: time to first packet, end-to-end
latency, audio seconds, real-time factor, and underruns of a simulated
real-time player (a wait of more than 100 ms for audio after playback
started) and the longest wait between two packets. Prints mean/p50/p95/p99,
aggregate audio seconds per wall second, underruns per stream and failures
per concurrency.

With ``--cold``, each concurrency gets a server of its own, started by this
script (``mlx-speech serve CHECKPOINT`` on a free local port) and stopped
after: it also reports the load time (start to a ready /health) and the time
to first packet of the first burst, the first ``concurrency`` requests, which
arrive together at a server that has served nothing yet; ``--backend`` is
passed to each such server (default: its own, ``MLX_SPEECH_BACKEND``, else
auto). Each level records the backend the server reports on /health.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import soundfile

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Streaming speech lets a listener start before the sentence is finished.",
    "Please confirm the meeting for Thursday at half past ten.",
    "A local server keeps your words on your own machine.",
    "今天天气很好，我们去公园散步吧。",
    "你好，欢迎使用本地语音合成服务。",
    "机器学习模型可以把文字变成自然的声音。",
    "请在周四上午十点半之前确认会议时间。",
]
UNDERRUN_SECONDS = 0.1


@dataclass
class Outcome:
    order: int  # when the request was sent, from 0
    first_packet_s: float
    latency_s: float
    audio_s: float
    underruns: int
    longest_gap_s: float  # the longest wait between two packets after the first


def _reference_clip(seconds: float = 3.0, rate: int = 24000) -> str:
    t = np.arange(int(seconds * rate)) / rate
    voice = 0.3 * np.sin(2 * np.pi * 140 * t * (1 + 0.05 * np.sin(5 * t)))
    buffer = io.BytesIO()
    soundfile.write(buffer, voice, rate, format="WAV")
    return base64.b64encode(buffer.getvalue()).decode()


def _one_request(client: httpx.Client, url: str, body: dict, order: int) -> Outcome:
    started = time.perf_counter()
    first = None
    received = 0.0  # seconds of audio received so far
    stalled = 0.0  # seconds the simulated player waited
    underruns = 0
    previous = None
    longest_gap = 0.0
    with client.stream(
        "POST", f"{url}/v1/audio/speech", json=body, timeout=600
    ) as response:
        response.raise_for_status()
        bytes_per_second = 2 * int(response.headers["x-audio-sample-rate"])
        for packet in response.iter_raw():
            now = time.perf_counter()
            if previous is not None:
                longest_gap = max(longest_gap, now - previous)
            previous = now
            if first is None:
                first = now
            else:
                played = now - first - stalled
                if played > received:
                    wait = played - received
                    stalled += wait
                    underruns += wait > UNDERRUN_SECONDS
            received += len(packet) / bytes_per_second
    latency = time.perf_counter() - started
    return Outcome(order, first - started, latency, received, underruns, longest_gap)


def run_level(url: str, concurrency: int, requests: int, body: dict) -> dict:
    """Each of ``concurrency`` threads sends its requests one after another
    over a client of its own, made before any is sent (as a real client keeps
    one: making eight at once takes half a CPU-second, which would compete
    with the server); the first ones leave together."""
    outcomes: list[Outcome] = []
    failures: list[str] = []
    pending = list(range(requests))[::-1]  # popped from the end: in order
    sent = 0
    lock = threading.Lock()
    clients = [httpx.Client() for _ in range(concurrency)]
    ready = threading.Barrier(concurrency)

    def worker(client: httpx.Client) -> None:
        nonlocal sent
        ready.wait()
        while True:
            with lock:
                if not pending:
                    return
                index = pending.pop()
                order, sent = sent, sent + 1
            request = {**body, "input": SENTENCES[index % len(SENTENCES)]}
            try:
                outcome = _one_request(client, url, request, order)
            except (httpx.HTTPError, KeyError) as error:
                with lock:
                    failures.append(f"{type(error).__name__}: {error}")
                continue
            with lock:
                outcomes.append(outcome)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    for client in clients:
        client.close()
    return _summary(concurrency, outcomes, failures, wall)


def _stats(values: list[float]) -> dict:
    if not values:
        return {}
    array = np.asarray(values)
    return {
        "mean": round(float(array.mean()), 3),
        "p50": round(float(np.percentile(array, 50)), 3),
        "p95": round(float(np.percentile(array, 95)), 3),
        "p99": round(float(np.percentile(array, 99)), 3),
    }


def _summary(concurrency: int, outcomes: list[Outcome], failures: list[str], wall: float):
    first_burst = [o.first_packet_s for o in outcomes if o.order < concurrency]
    return {
        "concurrency": concurrency,
        "requests": len(outcomes) + len(failures),
        "failures": len(failures),
        "failure_examples": failures[:3],
        "time_to_first_packet_s": _stats([o.first_packet_s for o in outcomes]),
        "first_burst_time_to_first_packet_s": _stats(first_burst),
        "latency_s": _stats([o.latency_s for o in outcomes]),
        "rtf": _stats([o.latency_s / o.audio_s for o in outcomes if o.audio_s]),
        "underruns": int(sum(o.underruns for o in outcomes)),
        "underruns_per_stream": _stats([o.underruns for o in outcomes]),
        "streams_with_underruns": sum(o.underruns > 0 for o in outcomes),
        "longest_gap_s": _stats([o.longest_gap_s for o in outcomes]),
        "audio_seconds_per_wall_second": round(sum(o.audio_s for o in outcomes) / wall, 3),
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(
    checkpoint: str, serve_args: list[str]
) -> tuple[subprocess.Popen, str, float]:
    """``mlx-speech serve`` on a free port → the process, its URL and the
    seconds from start until /health reports the model ready."""
    port = _free_port()
    command = shutil.which("mlx-speech", path=os.path.dirname(sys.executable))
    if command is None:
        raise SystemExit("mlx-speech is not installed beside this Python")
    started = time.perf_counter()
    process = subprocess.Popen(
        [
            command,
            "serve",
            "--model",
            checkpoint,
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
        + serve_args
    )
    url = f"http://127.0.0.1:{port}"
    while True:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode} while loading")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url, time.perf_counter() - started
        except httpx.HTTPError:
            pass
        time.sleep(0.05)


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def server_backend(url: str) -> str | None:
    """What runs the server's model (its /health says), if it says."""
    return httpx.get(f"{url}/health", timeout=10).json().get("backend")


def _cold_level(checkpoint, serve_args, concurrency, requests, body) -> dict:
    process, url, load_s = start_server(checkpoint, serve_args)
    try:
        backend = server_backend(url)
        level = run_level(url, concurrency, requests, body)
    finally:
        stop_server(process)
    return {**level, "load_s": round(load_s, 2), "backend": backend}


def _print_table(levels: list[dict]) -> None:
    cold = "load_s" in levels[0]
    extra = " load s | first burst ttfp p95 |" if cold else ""
    print(
        "| conc | ok/all | ttfp mean | ttfp p95 | latency p50 | latency p95 | rtf p50 "
        "| underruns (streams with any) | underruns per stream p95 "
        f"| longest gap p95 | audio s per s |{extra}"
    )
    print("|---" * (13 if cold else 11) + "|")
    for level in levels:
        ok = level["requests"] - level["failures"]
        ttfp, latency, rtf = (
            level["time_to_first_packet_s"],
            level["latency_s"],
            level["rtf"],
        )
        row = (
            f"| {level['concurrency']} | {ok}/{level['requests']} | {ttfp.get('mean')} "
            f"| {ttfp.get('p95')} | {latency.get('p50')} | {latency.get('p95')} "
            f"| {rtf.get('p50')} "
            f"| {level['underruns']} ({level['streams_with_underruns']}) "
            f"| {level['underruns_per_stream'].get('p95')} "
            f"| {level['longest_gap_s'].get('p95')} "
            f"| {level['audio_seconds_per_wall_second']} |"
        )
        if cold:
            burst = level["first_burst_time_to_first_packet_s"]
            row += f" {level['load_s']} | {burst.get('p95')} |"
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument(
        "--cold", default=None, metavar="CHECKPOINT", help="start a server per level"
    )
    parser.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        help="with --cold: an argument for mlx-speech serve (repeatable), "
        "e.g. --serve-arg=--max-batch=8",
    )
    parser.add_argument(
        "--backend",
        default=None,
        choices=("auto", "mlx", "host"),
        help="with --cold: what runs the model (default: $MLX_SPEECH_BACKEND, else auto)",
    )
    parser.add_argument("--requests", type=int, default=16, help="per concurrency level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument(
        "--clone", action="store_true", help="send a synthesized 3 s reference"
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    body = {"response_format": "pcm", "max_new_tokens": args.max_new_tokens, "seed": 1}
    if args.clone:
        body["ref_audio"] = _reference_clip()
    if args.cold:
        serve_args = args.serve_arg + (["--backend", args.backend] if args.backend else [])
        levels = [
            _cold_level(args.cold, serve_args, c, args.requests, body)
            for c in args.concurrency
        ]
    else:
        backend = server_backend(args.url)
        levels = [
            {**run_level(args.url, c, args.requests, body), "backend": backend}
            for c in args.concurrency
        ]
    print(f"backend: {levels[0]['backend']}")
    _print_table(levels)
    if args.json:
        Path(args.json).write_text(json.dumps(levels, indent=2) + "\n")


if __name__ == "__main__":
    main()
