"""The MLX worker: one thread owns every MLX call and multiplexes jobs.

Since MLX 0.31.2 streams are thread-local, so arrays must be built and
evaluated on one thread; loading runs here too. Jobs move forward one frame
at a time in turn, so a consumer that stops reading parks only its own job;
jobs of one model share each frame's forward pass (``batching``), at most
``max_batch`` at a time. At most ``max_active`` jobs compute at once; a job
parked by its reader keeps its model state but not its place, and up to
``max_parked`` of them may wait so; the rest wait to start in FIFO order.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import mlx.core as mx

from .batching import Batch, DeferredOutput
from .job import Job, log
from .limits import DEFAULT_MAX_BATCH, DEFAULT_MAX_PARKED
from .stream import ChunkStream

T = TypeVar("T")

DEFAULT_MAX_ACTIVE_JOBS = 8
# The longest a round waits for a job on its way (``Engine.expect``): a burst's
# requests are checked, and their streams first read, within a few ms.
GATHER_SECONDS = 0.05
# MLX's freed buffers are kept this long after the last job ends, so that
# requests a moment apart reuse them, then given back to the system.
IDLE_SECONDS_BEFORE_CLEARING = 30.0


class Engine:
    def __init__(
        self,
        max_active: int = DEFAULT_MAX_ACTIVE_JOBS,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_parked: int = DEFAULT_MAX_PARKED,
    ):
        if max_active < 1 or max_batch < 1 or max_parked < 0:
            raise ValueError(
                f"max_active and max_batch must be at least 1 and max_parked at "
                f"least 0, got {max_active}, {max_batch} and {max_parked}"
            )
        self.max_active = max_active
        self.max_batch = max_batch
        self.max_parked = max_parked
        # Called on the worker with (jobs in the forward, seconds) after each one.
        self.forward_observers: list[Callable[[int, float], None]] = []
        self._wakeup = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._active: list[Job] = []
        self._coming: dict[object, float] = {}  # streams not yet read → until when
        self._closing = False
        self._parked = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="mlx-speech-worker", daemon=True
        )
        self._thread.start()
        atexit.register(self.shutdown)

    def configure(self, max_batch: int, max_parked: int) -> None:
        """Jobs per shared forward (at least as many may then compute at once),
        and parked jobs that may keep their state."""
        if max_batch < 1 or max_parked < 0:
            raise ValueError(
                f"max_batch must be at least 1 and max_parked at least 0, "
                f"got {max_batch} and {max_parked}"
            )
        self.max_batch = max_batch
        self.max_active = max(self.max_active, max_batch)
        self.max_parked = max_parked
        self.notify()  # waiting jobs may now start

    def stream(self, start: Callable[[], Iterator[Any]]) -> ChunkStream:
        """A consumer handle; the job is queued when it is first read."""
        return ChunkStream(self, start)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the worker thread and return its result, once its job
        has ended (so it no longer counts in ``load``)."""

        def once() -> Iterator[tuple[T]]:
            yield (fn(),)  # boxed: a job's None publishes nothing

        ((result,),) = self.stream(once)
        return result

    def expect(self) -> Callable[[], None]:
        """A job on its way (a stream opened but not yet read, or a request
        still being checked): until the function returned is called (it was
        submitted, or will not be), and for ``GATHER_SECONDS`` at most, a
        round waits for it rather than start without it, so that jobs that
        arrive together share their first steps instead of starting a round
        (a burst's prompts) apart."""
        token = object()
        with self._wakeup:
            self._coming[token] = time.monotonic() + GATHER_SECONDS

        def arrived() -> None:
            with self._wakeup:
                if self._coming.pop(token, None) is not None:
                    self._wakeup.notify()

        return arrived

    def submit(self, job: Job) -> None:
        with self._wakeup:
            if self._closing:
                raise RuntimeError("the mlx-speech worker has shut down")
            self._waiting.append(job)
            self._wakeup.notify()

    def notify(self) -> None:
        """A consumer freed a queue slot or cancelled: re-check the jobs."""
        with self._wakeup:
            self._wakeup.notify()

    @property
    def load(self) -> tuple[int, int]:
        """(jobs holding model state, jobs waiting to start)."""
        with self._wakeup:
            holding = sum(not job.finished for job in self._active)
            return holding, len(self._waiting)

    @property
    def parked(self) -> int:
        """Jobs holding state while their readers have not taken their output."""
        with self._wakeup:
            return sum(job.parked for job in self._active)

    @property
    def capacity(self) -> int:
        """How many jobs could hold state now: those that do, and as many more
        as would start at once."""
        with self._wakeup:
            live = [job for job in self._active if not job.finished]
            return len(live) + self._free_slots(live)

    def _free_slots(self, live: list[Job]) -> int:
        computing = sum(not job.parked for job in live)
        return max(
            0,
            min(
                self.max_active - computing,
                self.max_active + self.max_parked - len(live),
            ),
        )

    def shutdown(self, timeout: float = 10.0) -> None:
        """Cancel every job, release their state and park the worker for good."""
        with self._wakeup:
            self._closing = True
            for job in [*self._active, *self._waiting]:
                job.cancel()
            self._wakeup.notify()
        self._parked.wait(timeout)

    def _next_round(self) -> list[Job] | None:
        with self._wakeup:
            while True:
                if self._closing:
                    for job in [*self._active, *self._waiting]:
                        job.close()
                    self._active.clear()
                    self._waiting.clear()
                    return None
                self._admit()
                runnable = [job for job in self._active if job.runnable]
                if runnable:
                    return runnable
                if self._active:
                    self._wakeup.wait()
                elif not self._wakeup.wait(IDLE_SECONDS_BEFORE_CLEARING):
                    mx.clear_cache()  # idle for a while: give the buffers back
                    self._wakeup.wait()

    def _admit(self, most: int | None = None) -> list[Job]:
        """Under the lock: forget finished jobs and start waiting ones (at
        most ``most``) while there is room; → the jobs started."""
        self._active = [job for job in self._active if not job.finished]
        started: list[Job] = []
        while (
            self._waiting
            and self._free_slots(self._active)
            and (most is None or len(started) < most)
        ):
            started.append(self._waiting.popleft())
            self._active.append(started[-1])
        return started

    def _arrivals(self, most: int) -> list[Job]:
        """Jobs that arrived while a round ran and start in it (at most
        ``most``: jobs that end at once must not hold up the round's steps),
        waiting for those on their way (``expect``) while there is room."""
        with self._wakeup:
            while not self._closing:
                started = self._admit(most)
                room = most > len(started) and self._free_slots(self._active) > 0
                wait = self._gathering() if room else 0.0
                if started or wait <= 0:
                    return started
                self._wakeup.wait(wait)
            return []

    def _gathering(self) -> float:
        """Under the lock: how long the latest job on its way may still be waited for."""
        now = time.monotonic()
        return max((until - now for until in self._coming.values()), default=0.0)

    def _run(self) -> None:
        while (runnable := self._next_round()) is not None:
            self._round(runnable)
        mx.clear_cache()
        self._parked.set()
        # Never return: a thread that used MLX runs MLX's thread-exit hooks,
        # which take the GIL and abort the process if Python is finalizing.
        # Blocked here, the thread simply ends with the process.
        threading.Event().wait()

    def _round(self, runnable: list[Job]) -> None:
        """Advance every runnable job, and the jobs that arrive meanwhile
        (so a burst's prompts all run before its first shared step rather than
        the late ones a round later), then flush what they submitted: first
        the batches that produce outputs (each published as it is produced),
        then the others."""
        producing: dict[int, Batch] = {}
        stepping: dict[int, Batch] = {}
        joined = 0
        while runnable:
            for job in runnable:
                pending = job.advance()
                if pending is None:
                    continue
                if isinstance(pending.output, DeferredOutput):
                    producing[id(pending.output.batch)] = pending.output.batch
                stepping[id(pending.batch)] = pending.batch
            runnable = self._arrivals(self.max_active - joined)
            joined += len(runnable)
        for key, batch in producing.items():
            self._flush(batch)
            stepping.pop(key, None)
        for batch in stepping.values():
            self._flush(batch)

    def _flush(self, batch: Batch) -> None:
        started = time.perf_counter()
        try:
            sizes = batch.flush(self.max_batch)
        except Exception:  # noqa: BLE001 - a batch reports failures to its jobs
            log.exception("a shared step failed outside its jobs")
            return
        if sizes:
            each = (time.perf_counter() - started) / len(sizes)
            for observe in list(self.forward_observers):
                for size in sizes:
                    observe(size, each)


_shared: Engine | None = None
_shared_lock = threading.Lock()


def shared_engine() -> Engine:
    """The process-wide worker every model of this library uses."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Engine()
        return _shared
