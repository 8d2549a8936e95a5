"""Hostile clients against a fresh `mlx-speech serve`, and what they cost the
others: the figures of the hostile-input work, reproducible.

    python bench/hostile_load.py CHECKPOINT expand        # limits after normalization
    python bench/hostile_load.py CHECKPOINT socket-stall  # a WebSocket that reads nothing
    python bench/hostile_load.py CHECKPOINT clip-memory [--at-once 4]
    python bench/hostile_load.py CHECKPOINT upload-sigterm

Each starts the server (the installed `mlx-speech`) on a free port with a
scratch voices directory, runs one attack and prints one line.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import soundfile
from websockets.sync.client import connect

MLX_SPEECH = shutil.which("mlx-speech") or str(Path(sys.executable).parent / "mlx-speech")
SHORT = {"input": "Hi.", "max_new_tokens": 2, "response_format": "pcm", "stream": False}


@contextmanager
def serving(checkpoint: str, *flags: str):
    """(url, process) of a server ready to answer; stopped on leaving."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as voices:
        command = [MLX_SPEECH, "serve", "--model", checkpoint, "--port", str(port)]
        server = subprocess.Popen(
            [*command, "--voices-dir", voices, "--log-level", "error", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            while not _healthy(url):
                if server.poll() is not None:
                    raise RuntimeError(f"the server exited: {server.stdout.read()[-500:]}")
                time.sleep(0.2)
            yield url, server
        finally:
            if server.poll() is None:
                server.terminate()
            server.wait(timeout=60)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _speak(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/audio/speech", json=body, timeout=600)


def _timed(url: str, body: dict) -> float:
    started = time.perf_counter()
    _speak(url, body)
    return time.perf_counter() - started


def _in_flight(url: str) -> int:
    gauges = dict(
        line.split(" ", 1)
        for line in httpx.get(url + "/metrics").text.splitlines()
        if line and not line.startswith("#")
    )
    return int(gauges["mlx_speech_active_streams"]) + int(gauges["mlx_speech_queue_depth"])


def expand(checkpoint: str, _: argparse.Namespace) -> str:
    """Eight 4,000-character texts of phone numbers (one frame each), then a
    control request: how long it waits, and how the eight are answered."""
    phones = ("555-123-4567 " * 320)[:4000]
    attack = {**SHORT, "input": phones, "max_new_tokens": 1}
    with serving(checkpoint) as (url, _):
        alone = _timed(url, SHORT)
        answers: list[tuple[int, float]] = []
        started = time.perf_counter()

        def send() -> None:
            status = _speak(url, attack).status_code
            answers.append((status, time.perf_counter() - started))

        threads = [threading.Thread(target=send) for _ in range(8)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        waited = _timed(url, SHORT)
        for thread in threads:
            thread.join()
    statuses = sorted({status for status, _ in answers})
    times = [seconds for _, seconds in answers]
    return (
        f"control {alone * 1000:.0f} ms alone, {waited:.2f} s beside the attack; "
        f"the eight: status {statuses}, answered in {min(times):.1f}-{max(times):.1f} s"
    )


def socket_stall(checkpoint: str, _: argparse.Namespace) -> str:
    """A WebSocket client sends 30 utterances and reads nothing; another
    client sends a short request every second for 60 s."""
    with serving(checkpoint) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        sock = socket.create_connection(("127.0.0.1", port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        ws_url = url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        with connect(ws_url, sock=sock, max_queue=1, close_timeout=1) as ws:
            config = {
                "type": "session.config",
                "response_format": "wav",
                "max_new_tokens": 200,
            }
            ws.send(json.dumps(config))
            for _ in range(30):
                text = "Hello there. How are you today?"
                ws.send(json.dumps({"type": "input.text", "text": text}))
                ws.send(json.dumps({"type": "input.done"}))
            started, refused, counted, last_held = time.monotonic(), [], [], None
            while time.monotonic() - started < 60:
                counted.append(_in_flight(url))
                if counted[-1]:
                    last_held = round(time.monotonic() - started, 1)
                if _speak(url, SHORT).status_code == 429:
                    refused.append(round(time.monotonic() - started, 1))
                time.sleep(1)
    return (
        f"most places counted: {max(counted)}; probes refused with 429: {len(refused)} "
        f"{refused[:3]}; a place last held at {last_held} s"
    )


def clip_memory(checkpoint: str, args: argparse.Namespace) -> str:
    """Requests at once, each with a 98 KB FLAC inline (30 s, 8 channels,
    384 kHz of silence): the server's peak resident memory."""
    buffer = io.BytesIO()
    silence = np.zeros((30 * 384_000, 8), np.float32)
    soundfile.write(buffer, silence, 384_000, format="FLAC")
    clip = base64.b64encode(buffer.getvalue()).decode()
    with serving(checkpoint) as (url, server):
        _speak(url, SHORT)
        before = _peak_mib(server.pid)
        statuses: list[int] = []

        def send() -> None:
            statuses.append(_speak(url, {**SHORT, "ref_audio": clip}).status_code)

        started = time.perf_counter()
        threads = [threading.Thread(target=send) for _ in range(args.at_once)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        took = time.perf_counter() - started
        after = _peak_mib(server.pid)
    return (
        f"{args.at_once} at once: peak RSS {before} -> {after} MiB; "
        f"statuses {sorted(set(statuses))}; {took:.1f} s"
    )


def _peak_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def upload_sigterm(checkpoint: str, _: argparse.Namespace) -> str:
    """A voice upload stalls mid-body, and the server is sent SIGTERM: what
    the client gets, and whether the log has a traceback."""
    with serving(checkpoint, "--shutdown-timeout", "3") as (url, server):
        port = int(url.rsplit(":", 1)[1])
        upload = socket.create_connection(("127.0.0.1", port))
        upload.sendall(
            b"POST /v1/audio/voices HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: multipart/form-data; boundary=xyz\r\n"
            b"Content-Length: 100000\r\n\r\n--xyz\r\n"
            b'Content-Disposition: form-data; name="name"\r\n\r\nbob\r\n'
        )
        time.sleep(0.5)
        server.send_signal(signal.SIGTERM)
        upload.settimeout(15)
        answer = upload.recv(4096).decode(errors="replace")
        status = answer.split("\r\n", 1)[0]
        kind = next(
            (
                line
                for line in answer.split("\r\n")
                if line.lower().startswith("content-type")
            ),
            "no content-type",
        )
        code = server.wait(timeout=60)
        log = server.stdout.read()
    traceback = "a traceback" if "Traceback" in log else "no traceback"
    return (
        f"client got {status!r} ({kind}); server exited {code} with {traceback} in its log"
    )


ATTACKS = {
    "expand": expand,
    "socket-stall": socket_stall,
    "clip-memory": clip_memory,
    "upload-sigterm": upload_sigterm,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("attack", choices=ATTACKS)
    parser.add_argument("--at-once", type=int, default=4, help="clip-memory's requests")
    args = parser.parse_args()
    print(f"{args.attack}: {ATTACKS[args.attack](args.checkpoint, args)}")


if __name__ == "__main__":
    main()
