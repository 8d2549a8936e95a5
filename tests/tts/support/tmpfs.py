"""The installed command run with a folder of its own mounted as a tmpfs
(read-only, or small enough to fill), in a user and mount namespace made
for it (``unshare -rm``): a real read-only or full disk, no root needed;
skipped where the system has no user namespaces."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .cli import MLX_SPEECH


def run_on_a_tmpfs(folder: Path, mount: str, *args: str) -> subprocess.CompletedProcess:
    """``mlx-speech ARGS`` with ``folder`` a tmpfs mounted with ``mount``'s
    options (``ro``, ``size=96k``)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no user namespaces here: {probe.stderr.decode().strip()}")
    folder.mkdir(exist_ok=True)
    script = f'mount -t tmpfs -o {mount} none "$1" && shift && exec "$@"'
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", str(folder), MLX_SPEECH, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
