"""Running the installed ``mlx-speech`` command as a user would."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

MLX_SPEECH = shutil.which("mlx-speech") or str(Path(sys.executable).parent / "mlx-speech")


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MLX_SPEECH, *args], input=stdin, capture_output=True, text=True, timeout=300
    )


def start_serving(speaking_dir, *flags: str) -> tuple[subprocess.Popen, str]:
    """``mlx-speech serve`` on a free port, once /health answers 200."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [MLX_SPEECH, "serve", "--model", str(speaking_dir), "--port", str(port), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "MLX_SPEECH_API_KEY": ""},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return server, url
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline and server.poll() is None
        time.sleep(0.1)
