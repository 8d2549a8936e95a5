"""What the package imports is what its plain install brings: a module that
imports a library only the test extras install works here and fails for a
user (as the WebSocket route once did without ``websockets``)."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import mlx_speech

PACKAGE = Path(mlx_speech.__file__).parent
# Imported only where their extra is installed, and said so when missing.
EXTRAS_ONLY = {"sounddevice": "play"}
# Builds checkpoints for tests and benchmarks, with what mlx-audio brings.
NOT_INSTALLED_CODE = PACKAGE / "testing"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _third_party_imports() -> dict[str, Path]:
    """Top-level module → a file of the package importing it."""
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        if NOT_INSTALLED_CODE in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "mlx_speech":
                    found.setdefault(top, path)
    return found


def test_every_library_the_package_imports_is_a_dependency():
    requirements = metadata.requires("mlx-speech-server")
    plain = {
        _canonical(re.split(r"[\s;<>=!~\[]", line)[0])
        for line in requirements
        if "extra ==" not in line
    }
    providers = metadata.packages_distributions()
    # a module not installed here is one a requirement's marker leaves out
    # on this Python (exceptiongroup before 3.11): named as its requirement
    missing = {
        module: str(path.relative_to(PACKAGE))
        for module, path in _third_party_imports().items()
        if module not in EXTRAS_ONLY
        and not {_canonical(d) for d in providers.get(module, [module])} & plain
    }
    assert not missing, f"imported, but not in the plain install: {missing}"
