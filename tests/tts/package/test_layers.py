"""The layers of docs/architecture.md, as a fresh interpreter sees them:
the serving core knows no protocol, and the Wyoming adapter stands on the
core, not on HTTP (``--no-http``, through ``server``, loads neither HTTP's
modules nor Starlette)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def modules_loaded_by(module: str) -> set[str]:
    probe = f"import sys, {module}; print('\\n'.join(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


@pytest.mark.parametrize(
    "module", ["mlx_speech.serving.state", "mlx_speech.wyoming_server", "mlx_speech.server"]
)
def test_the_core_and_wyoming_load_nothing_of_http(module):
    loaded = modules_loaded_by(module)
    http = {name for name in loaded if name.startswith(("mlx_speech.http", "starlette"))}
    assert not http, f"{module} loads {sorted(http)}"
    if module == "mlx_speech.serving.state":
        assert "mlx_speech.wyoming_server" not in loaded
