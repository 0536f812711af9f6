"""A model's worker threads over one shared session, and their replacement when one dies.

Every worker runs batches on the pool's one runner (ONNX Runtime's ``Run`` is thread-safe, so the weights are held
once), at most ``parallel_runs`` of them at once (the run gate they share). A worker that dies (service/runtime.py:
its thread raised, or its session kept failing) is replaced by a new worker on a fresh session, which then serves
every worker. While no worker is alive the batcher fails what is queued and refuses new rows with a 503 naming the
model, and the engine reports not ready. Deaths close together back off: the first replacement is immediate, each
further one within ``HEALTHY_AFTER_S`` waits twice as long, up to ``MAX_BACKOFF_S``; a session that cannot be built
is retried on the same schedule.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from service.batcher import Batcher
from service.errors import NotReady
from service.runtime import BatchObserver, Lane, Lanes, Worker
from service.sessions import ModelRunner

logger = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
HEALTHY_AFTER_S = 60.0  # a death this long after the previous one starts the back-off over


class WorkerPool:
    def __init__(
        self,
        name: str,
        batcher: Batcher,
        runner: ModelRunner,
        make_runner: Callable[[], ModelRunner] | None,
        count: int,
        pad_token_id: int,
        token_level: frozenset[str],
        observer: BatchObserver | None = None,
        parallel_runs: int | None = None,
    ) -> None:
        """``make_runner`` builds a fresh session for a replacement (None: dead workers are not replaced);
        ``parallel_runs``: how many workers may run a batch at once (default: all of them)."""
        self.name = name
        self.own = Lane(name, batcher, runner, observer)
        self.lanes = Lanes(self.own)  # the model's own, then its adapters' (add_lane)
        self.make_runner = make_runner
        self.parallel_runs = parallel_runs or count
        self.gate = threading.BoundedSemaphore(self.parallel_runs) if self.parallel_runs < count else None
        self._pad_token_id = pad_token_id
        self._token_level = token_level
        self.workers = [self._worker(number) for number in range(count)]
        self.restarts = 0  # workers replaced
        self.last_death: str | None = None
        self._deaths_in_a_row = 0
        self._last_death_at = -HEALTHY_AFTER_S
        self._lock = threading.Lock()
        self._timers: list[threading.Timer] = []
        self._stopping = False

    @property
    def runner(self) -> ModelRunner:
        """The model's own runner (its session)."""
        return self.own.runner

    @runner.setter
    def runner(self, runner: ModelRunner) -> None:
        self.own.runner = runner

    def add_lane(self, lane: Lane) -> None:
        """Serve another model's batcher (made with ``self.lanes.lock``) on these workers and session: a LoRA
        adapter's, whose ``rebind`` makes its runner from a replacement session."""
        self.lanes.add(lane)

    def closed(self) -> bool:
        """Whether every lane's batcher is closed (the workers end once they are drained)."""
        with self.lanes.lock:
            return all(batcher.closed_locked() for batcher in self.lanes.batchers())

    def _worker(self, number: int) -> Worker:
        on_death = self._on_death if self.make_runner is not None else None
        return Worker(self.name, self.lanes, self._pad_token_id, self._token_level, number, self.gate, on_death)

    @property
    def live(self) -> int:
        return sum(worker.alive for worker in self.workers)

    def start(self) -> None:
        """Start the workers not started yet (a pool's lanes each start it)."""
        with self._lock:
            for worker in self.workers:
                if not worker.started:
                    worker.start()

    def stop(self) -> None:
        """No more replacements (the batcher's close ends the live workers)."""
        with self._lock:
            self._stopping = True
            for timer in self._timers:
                timer.cancel()

    def join(self, timeout_s: float) -> None:
        for worker in list(self.workers):
            if worker.started:
                worker.join(timeout_s)

    def backoff_s(self) -> float:
        """How long the next replacement waits: 0 after a healthy spell, else doubling up to MAX_BACKOFF_S."""
        if self._deaths_in_a_row <= 1:
            return 0.0
        return min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (self._deaths_in_a_row - 2))

    def _on_death(self, worker: Worker) -> None:
        """Called on the dying worker's thread, after it failed its own batch."""
        with self._lock:
            if self._stopping:
                return
            now = time.monotonic()
            healthy = now - self._last_death_at >= HEALTHY_AFTER_S
            self._deaths_in_a_row = 1 if healthy else self._deaths_in_a_row + 1
            self._last_death_at = now
            self.last_death = repr(worker.died)
            if self.live == 0:
                error = NotReady(f"model {self.name} has no live worker ({self.last_death}); it is being replaced")
                for batcher in self.lanes.batchers():
                    batcher.suspend(error)
            self._schedule(worker, self.backoff_s())

    def _schedule(self, dead: Worker, delay_s: float) -> None:
        if delay_s > 0:
            logger.warning("model %s: replacing worker %d in %.1f s", self.name, dead.number, delay_s)
        timer = threading.Timer(delay_s, self._replace, args=(dead, delay_s))
        timer.daemon = True
        self._timers = [pending for pending in self._timers if pending.is_alive()] + [timer]
        timer.start()

    def _replace(self, dead: Worker, waited_s: float) -> None:
        assert self.make_runner is not None
        try:
            runner = self.make_runner()
        except Exception:
            logger.exception("model %s: a fresh session could not be built", self.name)
            with self._lock:
                if not self._stopping:
                    self._schedule(dead, min(MAX_BACKOFF_S, max(FIRST_BACKOFF_S, 2 * waited_s)))
            return
        with self._lock:
            if self._stopping:
                return
            for lane in self.lanes.lanes:
                lane.runner = runner if lane.rebind is None else lane.rebind(runner)
            for worker in self.workers:
                worker.runner = None  # every worker on the fresh session
            fresh = self._worker(dead.number)
            self.workers[self.workers.index(dead)] = fresh
            fresh.start()
            for batcher in self.lanes.batchers():
                batcher.resume()
            self.restarts += 1
        logger.info("model %s: worker %d replaced (restart %d)", self.name, dead.number, self.restarts)
