from .stream import ChunkStream
from .worker import DEFAULT_MAX_BATCH, Engine, shared_engine

__all__ = ["DEFAULT_MAX_BATCH", "ChunkStream", "Engine", "shared_engine"]
