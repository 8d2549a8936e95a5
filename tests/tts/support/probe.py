"""What ffprobe reads of a file we wrote: its format, streams and chapters."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def probed(path: str | Path) -> dict:
    command = ["ffprobe", "-v", "error", "-show_chapters", "-show_format"]
    command += ["-show_streams", "-of", "json", str(path)]
    return json.loads(subprocess.run(command, capture_output=True, check=True).stdout)
