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


def test_the_library_loads_nothing_of_books():
    """Books are a client of ``TTS``, above it: speaking loads none of them."""
    loaded = modules_loaded_by("mlx_speech.tts")
    assert not {name for name in loaded if name.startswith("mlx_speech.book")}


AS_ON_A_MAC = """
import sys
import urllib.request  # noqa: its macOS branch needs macOS itself
import mlx.core, mlx_audio, numpy, scipy.signal, soundfile  # noqa
sys.platform = "darwin"  # from here on, mlx-speech sees a Mac
import mlx_speech
tts = mlx_speech.load(sys.argv[1], voices_dir=sys.argv[2])
audio = tts.speak("Hello there.", max_new_tokens=3, seed=1)
print(tts.backend, audio.duration > 0)
print("\\n".join(name for name in sys.modules if name.startswith("mlx_speech.")))
"""


@pytest.mark.slow
def test_a_mac_loads_and_speaks_without_importing_the_host_engine(speaking_dir, tmp_path):
    """What lint-imports cannot see: backends imports the host engine inside
    a function; on a Mac that import never runs."""
    done = subprocess.run(
        [sys.executable, "-c", AS_ON_A_MAC, str(speaking_dir), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    first, *loaded = done.stdout.split("\n")
    assert first == "mlx True"
    assert "mlx_speech.families.moss_nano.service" in loaded  # it did load the model
    linux = [name for name in loaded if name.startswith("mlx_speech.host_engine")]
    assert not linux, f"a Mac's path loads {linux}"


# Outside the layers by design: the accelerator beside the families, the
# checkpoints the tests build, the page's static files.
OUTSIDE_THE_LAYERS = {"host_engine", "testing", "page"}


def _contracts() -> list[dict]:
    from pathlib import Path

    import tomllib

    pyproject = Path(__file__).parents[3] / "pyproject.toml"
    return tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]


def _top_level_modules() -> set[str]:
    from pathlib import Path

    import mlx_speech

    package = Path(mlx_speech.__file__).parent
    modules = {path.stem for path in package.glob("*.py") if path.stem != "__init__"}
    modules |= {
        path.name for path in package.iterdir() if path.is_dir() and path.name[0] != "_"
    }
    return modules


def test_every_module_is_in_the_layers_and_kept_from_the_host_engine():
    """A new package of ``mlx_speech`` that no contract names is unguarded:
    this fails until the layers and the host engine's contract name it."""
    layers, host = (
        next(c for c in _contracts() if c["type"] == kind and word in c["name"])
        for kind, word in (("layers", "Adapters"), ("forbidden", "Only backends"))
    )
    named = {
        name.strip().removeprefix("mlx_speech.")
        for layer in layers["layers"]
        for name in layer.replace("|", ":").split(":")
    }
    modules = _top_level_modules() - OUTSIDE_THE_LAYERS
    assert modules - named == set()
    sources = {name.removeprefix("mlx_speech.") for name in host["source_modules"]}
    assert modules - sources == {"backends"}  # it alone brings the host engine


def test_each_test_folder_is_named_as_the_package_it_tests():
    """So that a package's tests are found where its name says; the
    top-level modules' are in ``package/``, the helpers in ``support/``."""
    from pathlib import Path

    import mlx_speech

    def folders_in(folder: Path) -> set[str]:
        return {path.name for path in folder.iterdir() if path.is_dir()} - {"__pycache__"}

    tests = folders_in(Path(__file__).parents[1]) - {"package", "support"}
    assert tests - folders_in(Path(mlx_speech.__file__).parent) == set()
