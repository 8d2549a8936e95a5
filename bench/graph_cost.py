"""What a piece of MLX work costs the host: the primitives it evaluates and
the times the host waits for them.

    with GraphCost() as cost:
        ...           # MLX work, evaluated inside (by mx.eval, .tolist(), ...)
    cost.primitives, cost.computing, cost.syncs

While counting, every evaluation through ``mx.eval``, ``mx.async_eval``,
``array.tolist``, ``array.item`` and ``array.__array__`` (numpy) first walks
the graph it is about to run (``mx.export_to_dot``: each primitive not yet
evaluated is a node). A sync is one of those calls but ``mx.async_eval``
where the host stops until the device has computed what it asked for: the
arrays hold work, or work was queued (``mx.async_eval``) since the last
wait. Reading back an array already computed is no sync. Views
(reshapes, transposes, slices, broadcasts) cost no kernel on a GPU, so
``computing`` leaves them out; on MLX's CPU backend every primitive is a task
its scheduler runs. The walk takes time, so time the same work apart:
``BuildTime`` does, for the host's share of it.
"""

from __future__ import annotations

import io
import re
import time
from collections import Counter

import mlx.core as mx

VIEWS = frozenset(
    {"AsStrided", "Broadcast", "ExpandDims", "Reshape", "Slice", "Split", "Squeeze"}
    | {"StopGradient", "Transpose", "Flatten", "Unflatten", "View"}
)
_PRIMITIVE = re.compile(r'label ="([^"]+)", shape=rectangle')


class GraphCost:
    def __init__(self):
        self.by_primitive: Counter[str] = Counter()
        self.syncs = 0
        self._queued = False  # work handed over by mx.async_eval since the last wait
        self._originals: dict = {}

    @property
    def primitives(self) -> int:
        return sum(self.by_primitive.values())

    @property
    def computing(self) -> int:
        return sum(n for name, n in self.by_primitive.items() if name not in VIEWS)

    def _walk(self, *trees) -> int:
        """Counts the primitives still to evaluate under ``trees``; → how many."""
        arrays: list[mx.array] = []
        _gather(trees, arrays)
        if not arrays:
            return 0
        text = io.StringIO()
        mx.export_to_dot(text, *arrays)
        found = [label.split(" ")[0] for label in _PRIMITIVE.findall(text.getvalue())]
        self.by_primitive.update(found)
        return len(found)

    def _waited(self, *trees) -> None:
        """A call that returns once ``trees`` are computed: the host waits
        if they hold work, or if work was queued since its last wait (the
        device runs it in order); reading arrays already computed is no wait."""
        if self._walk(*trees) or self._queued:
            self.syncs += 1
        self._queued = False

    def __enter__(self) -> GraphCost:
        module_eval, async_eval = mx.eval, mx.async_eval
        methods = {
            name: getattr(mx.array, name) for name in ("tolist", "item", "__array__")
        }
        self._originals = {"eval": module_eval, "async_eval": async_eval, **methods}

        def counted_eval(*trees):
            self._waited(*trees)
            return module_eval(*trees)

        def counted_async_eval(*trees):
            self._queued = self._walk(*trees) > 0 or self._queued
            return async_eval(*trees)

        def counted(method):
            def read(array, *args, **kwargs):
                self._waited(array)
                return method(array, *args, **kwargs)

            return read

        mx.eval, mx.async_eval = counted_eval, counted_async_eval
        for name, method in methods.items():
            setattr(mx.array, name, counted(method))
        return self

    def __exit__(self, *exc) -> None:
        mx.eval = self._originals.pop("eval")
        mx.async_eval = self._originals.pop("async_eval")
        for name, method in self._originals.items():
            setattr(mx.array, name, method)


class BuildTime:
    """How long the host takes to build each piece of work before handing it
    to the device: from each ``start()`` to the first evaluation after it
    (``mx.async_eval`` or ``mx.eval``). While the device runs the last piece,
    this is what the host must fit in to keep it busy."""

    def __init__(self):
        self.seconds: list[float] = []
        self._started: float | None = None
        self._originals: dict = {}

    def start(self) -> None:
        self._started = time.perf_counter()

    def _evaluating(self) -> None:
        if self._started is not None:
            self.seconds.append(time.perf_counter() - self._started)
            self._started = None

    def __enter__(self) -> BuildTime:
        self._originals = {"eval": mx.eval, "async_eval": mx.async_eval}

        def timed(evaluate):
            def run(*trees):
                self._evaluating()
                return evaluate(*trees)

            return run

        mx.eval, mx.async_eval = (timed(f) for f in self._originals.values())
        return self

    def __exit__(self, *exc) -> None:
        mx.eval, mx.async_eval = self._originals["eval"], self._originals["async_eval"]


def _gather(tree, into: list) -> None:
    if isinstance(tree, mx.array):
        into.append(tree)
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            _gather(item, into)
    elif isinstance(tree, dict):
        for item in tree.values():
            _gather(item, into)
