"""The server's state, typed: one per server, shared by its adapters (the
HTTP app holds it as ``app.state``; Wyoming sessions are handed it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..engine import Engine, shared_engine
from ..settings import ServerSettings
from ..voices.store import VoiceStore
from .books import BookJobs, default_books_dir
from .connections import OpenSockets
from .metrics import Metrics
from .shutdown import Shutdown
from .slot import Loader, ModelSlot


@dataclass
class ServerState:
    settings: ServerSettings
    slot: ModelSlot
    store: VoiceStore
    engine: Engine
    books: BookJobs
    metrics: Metrics = field(default_factory=Metrics)
    shutdown: Shutdown = field(default_factory=Shutdown)
    sockets: OpenSockets = field(default_factory=OpenSockets)
    started: int = field(default_factory=lambda: int(time.time()))  # Unix seconds
    # protocol → "serving", "stopped" or "failed: why"; /health reports them
    listeners: dict[str, str] = field(default_factory=dict)
    wyoming_port: int | None = None  # where Wyoming listens, once it does


def server_state(settings: ServerSettings, load: Loader) -> ServerState:
    """The state for ``settings``; ``load`` gives the model once the server
    starts (``serving``), sharing the server's one voice store."""
    store = VoiceStore(settings.voices_dir)
    store.sweep()
    slot = ModelSlot(
        settings.model,
        load,
        store,
        dict(settings.voice_aliases),
        normalize=settings.normalize,
        quantize=settings.quantize,
        backend=settings.backend,
        max_text_chars=settings.max_input_chars,
        lexicon=settings.lexicon,
    )
    engine = shared_engine()
    books_dir = settings.books_dir or default_books_dir()
    books = BookJobs(books_dir, settings.max_books, slot, engine)
    return ServerState(
        settings=settings, slot=slot, store=store, engine=engine, books=books
    )
