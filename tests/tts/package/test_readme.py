"""The README's commands run as written: its Python example, in a folder
where the README's tiny checkpoint (``ckpt``) was built, and its quick
starts from that checkpoint to a book and a server."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import soundfile

from tests.tts.support.probe import probed

README = Path(__file__).parents[3] / "README.md"

pytestmark = pytest.mark.slow  # a subprocess


def test_the_python_example_runs_as_written(speaking_dir, tmp_path):
    (example,) = re.findall(r"### Python\n\n```python\n(.*?)```", README.read_text(), re.S)
    (tmp_path / "ckpt").symlink_to(speaking_dir)
    done = subprocess.run(
        [sys.executable, "-c", example],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "samples" in done.stdout
    assert soundfile.info(tmp_path / "cloned.wav").frames > 0


def _shell_block(heading: str, containing: str = "") -> list[str]:
    """The command lines of the README's first ``sh`` block under
    ``heading`` (that contains ``containing``), comments cut."""
    text = README.read_text().split(f"\n{heading}\n", 1)[1]
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        if containing in block:
            return [line.split("  #")[0].strip() for line in block.splitlines()]
    raise AssertionError(f"no sh block under {heading}")


def test_the_quick_starts_run_as_written_offline(tmp_path):
    """From the tiny checkpoint the README builds to a book and a server:
    each command as written, in a folder laid out as a fresh clone's (the
    README's first command, which fetches from the hub, is CI's install)."""
    root = README.parent
    for name in (".venv", "bench", "tests"):
        (tmp_path / name).symlink_to(root / name)
    environment = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    environment["MLX_SPEECH_API_KEY"] = ""

    def run(line: str) -> None:
        done = subprocess.run(
            line, shell=True, cwd=tmp_path, env=environment, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, f"{line}\n{done.stderr}"

    (checkpoint,) = _shell_block("## Install and first sound", "make_checkpoint.py ckpt")
    run(checkpoint)
    (example,) = re.findall(r"### Python\n\n```python\n(.*?)```", README.read_text(), re.S)
    run(f".venv/bin/python -c {shlex.quote(example)}")
    for line in _shell_block("### A book"):
        run(line)
    assert probed(tmp_path / "lighthouse.m4b")["chapters"]
    assert (tmp_path / "lighthouse.vtt").read_text().startswith("WEBVTT")
    for line in _shell_block("### A server for OpenAI clients"):
        if " serve " in line:
            _serves_and_stops(line, tmp_path, environment)
        else:
            run(line)
    assert soundfile.info(tmp_path / "hi.mp3").frames > 0


def _serves_and_stops(line: str, folder: Path, environment: dict) -> None:
    """The server a line starts answers /health, then stops on SIGTERM;
    on a free port (the README's 8000 may be taken here)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        f"exec {line} --port {port}", shell=True, cwd=folder, env=environment,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not _healthy(port):
            assert server.poll() is None and time.monotonic() < deadline, line
            time.sleep(0.2)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0, line
    finally:
        if server.poll() is None:
            server.kill()


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False
