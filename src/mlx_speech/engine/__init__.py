from .stream import ChunkStream
from .worker import Engine, shared_engine

__all__ = ["ChunkStream", "Engine", "shared_engine"]
