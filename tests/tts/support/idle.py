"""Waiting for the worker to hold no jobs."""

from __future__ import annotations

import time

from mlx_speech.engine import Engine, shared_engine


def wait_until_idle(engine: Engine | None = None, timeout: float = 10.0) -> None:
    engine = engine or shared_engine()
    deadline = time.monotonic() + timeout
    while engine.load != (0, 0):
        assert time.monotonic() < deadline, f"worker still busy: {engine.load}"
        time.sleep(0.01)
