"""The README's Python example runs as written, in a folder where the
README's tiny checkpoint (``ckpt``) was built."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile

README = Path(__file__).parents[3] / "README.md"

pytestmark = pytest.mark.slow  # a subprocess


def test_the_python_example_runs_as_written(speaking_dir, tmp_path):
    (example,) = re.findall(
        r"## Python API\n\n```python\n(.*?)```", README.read_text(), re.S
    )
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
