from typing import Any

from .limits import DEFAULT_MAX_BATCH, DEFAULT_MAX_PARKED
from .stream import ChunkStream

__all__ = [
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_PARKED",
    "ChunkStream",
    "Engine",
    "shared_engine",
]


def __getattr__(name: str) -> Any:
    # The worker imports MLX: it loads at first use, not with the command
    # line's argument parsing.
    if name in ("Engine", "shared_engine"):
        from . import worker

        return getattr(worker, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
