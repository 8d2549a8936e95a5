"""Running the installed ``mlx-speech`` command as a user would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

MLX_SPEECH = shutil.which("mlx-speech") or str(Path(sys.executable).parent / "mlx-speech")


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MLX_SPEECH, *args], input=stdin, capture_output=True, text=True, timeout=300
    )
