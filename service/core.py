"""The core a transport serves from: bundles loaded on the device, the registry, the engines' workers, the metrics.

No FastAPI here: the HTTP app (``service.app``) receives a ``ServiceCore`` and only starts and stops it; any other
transport (gRPC, a batch runner, a script) does the same and calls ``infer``:

    core = ServiceCore(settings)
    core.load()                              # bundles -> engines (BundleError / DeviceUnavailable: one line)
    await core.start()                       # workers + warm-up, in the background: ``core.ready`` turns True
    result = await core.infer(InferenceRequest(task, inputs, params, model))
    await core.stop()                        # refuse new work, drain the queues, stop the workers
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from service.engine import Engine
from service.inference import ClientGone, InferenceRequest, InferenceResult, run_inference
from service.metrics import ServiceMetrics
from service.registry import ModelRegistry, load_engines
from service.runtime import release_free_memory
from service.settings import Settings

logger = logging.getLogger(__name__)

# glibc keeps the heap a burst freed (thousands of connections, megabyte bodies): without handing it back now and
# then, RSS stays at the burst's high-water mark (benchmarks/results/hostile.md).
TRIM_EVERY_S = 15.0


class ServiceCore:
    """The served models and everything they run on; one per process, whatever the transports."""

    def __init__(
        self,
        settings: Settings,
        engines: Mapping[str, Engine] | None = None,
        broken: Mapping[str, str] | None = None,
    ) -> None:
        """``engines``: already loaded engines (else ``load`` reads ``settings``' models); ``broken``: bundles
        skipped when they were loaded (``skip_broken``), name -> reason."""
        self.settings = settings
        self.metrics = ServiceMetrics()
        self.executor = ThreadPoolExecutor(settings.prepare_threads, thread_name_prefix="bertserve-prepare")
        self.registry = ModelRegistry({})
        self._engines = dict(engines) if engines is not None else None
        self._broken = dict(broken or {})
        self._tasks: list[asyncio.Task[None]] = []
        self.loaded = False

    @property
    def ready(self) -> bool:
        return self.registry.ready

    def load(self) -> None:
        """Load every bundle (blocking: call it from a thread inside an event loop) and build the registry. Raises
        BundleError naming a bad bundle (unless ``skip_broken``) and DeviceUnavailable when the device cannot be had."""
        if self._engines is None:
            record = self._broken if self.settings.skip_broken else None
            self._engines = load_engines(self.settings.model_sources(), self.settings, self.executor, record)
        for name, engine in self._engines.items():
            observer = self.metrics.observer(name, engine.task)
            for worker in engine.workers:
                if worker.observer is None:
                    worker.observer = observer
            self.metrics.watch_queue(name, engine.task, functools.partial(getattr, engine.batcher, "queue_depth"))
            self.metrics.watch_engine(engine)
            self.metrics.record_batching(name, engine.task, engine.batching)
        self.registry = ModelRegistry(self._engines, self._broken, self.settings.default_model)
        self.loaded = True

    async def start(self) -> None:
        """Load (in a thread) unless loaded, then start and warm up every engine in the background: ``ready`` turns
        True when all are warm; a failed start is logged and the core stays not ready."""
        if not self.loaded:
            await asyncio.to_thread(self.load)
        starting = asyncio.create_task(self.registry.start_all())
        starting.add_done_callback(_log_start_failure)
        self._tasks = [starting, asyncio.create_task(_trim_free_memory())]

    async def infer(self, request: InferenceRequest, client_gone: ClientGone | None = None) -> InferenceResult:
        """One request through the limits every transport shares (``service.inference.run_inference``)."""
        return await run_inference(request, self.registry, self.settings, client_gone)

    async def stop(self, drain: bool = True) -> None:
        """Readiness off, then finish (``drain``) or fail what is queued and stop every worker."""
        self.registry.shutting_down = True
        for task in self._tasks:
            if not task.done():
                task.cancel()
        await self.registry.stop_all(drain=drain)
        self.executor.shutdown(wait=False)
        logger.info("stopped")


async def _trim_free_memory() -> None:
    while True:
        await asyncio.sleep(TRIM_EVERY_S)
        await asyncio.to_thread(release_free_memory)


def _log_start_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.critical("start-up failed; the service stays not ready", exc_info=task.exception())
