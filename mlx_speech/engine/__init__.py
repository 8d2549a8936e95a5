from .stream import ChunkStream
from .worker import DEFAULT_MAX_BATCH, DEFAULT_MAX_PARKED, Engine, shared_engine

__all__ = [
    "DEFAULT_MAX_BATCH",
    "DEFAULT_MAX_PARKED",
    "ChunkStream",
    "Engine",
    "shared_engine",
]
