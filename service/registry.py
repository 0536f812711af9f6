"""The loaded engines by name, the model-selection rules, and the service's readiness."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from contract.bundle import BundleError
from service.device import resolve_device
from service.engine import Engine
from service.errors import BadRequest, ModelNotFound
from service.runtime import release_free_memory
from service.settings import Settings

logger = logging.getLogger(__name__)


def load_engines(
    sources: Mapping[str, Path],
    settings: Settings,
    executor: ThreadPoolExecutor | None = None,
    broken: dict[str, str] | None = None,
) -> dict[str, Engine]:
    """Load every bundle. The first bad one raises BundleError naming its folder, unless ``broken`` is given:
    then every bad one is skipped and recorded there, name -> what is wrong with it. DeviceUnavailable (the device
    setting cannot be had) is never skipped."""
    engines: dict[str, Engine] = {}
    device = resolve_device(settings.device)
    for name, path in sources.items():
        try:
            engines[name] = Engine.from_bundle(path, settings, name=name, executor=executor, device=device)
        except BundleError as exc:
            if broken is None:
                raise
            logger.error("skipping model %s: %s", name, exc)
            broken[name] = exc.problem
    release_free_memory()  # the model files' parse buffers: about a third of a model's size at ready
    return engines


class ModelRegistry:
    def __init__(
        self, engines: Mapping[str, Engine], broken: Mapping[str, str] | None = None, default: str | None = None
    ) -> None:
        """``default``: the model a request that names none goes to, when several are served and it serves the
        request's task (``--default-model``)."""
        self.engines = dict(engines)
        self.broken = dict(broken or {})  # bundles skipped at start-up (skip_broken): name -> reason
        if default is not None and default not in self.engines:
            raise ValueError(f"default model {default!r} is not loaded (loaded: {', '.join(sorted(self.engines))})")
        self.default = default
        self.shutting_down = False
        self.started = False

    @property
    def ready(self) -> bool:
        return self.started and not self.shutting_down and all(engine.ready for engine in self.engines.values())

    def select(self, task: str | None, name: str | None, unnamed: str = "name the model") -> Engine:
        """The engine for a request: by name (serving ``task``, or any task when None), else the only one serving
        ``task`` (or any task when None), else the default model when it serves ``task``. ``unnamed``: what a
        request of any task that names none is told to do when several models are served and none is the default."""
        if name is None and self.default is not None:
            only = [engine for engine in self.engines.values() if task is None or engine.task == task]
            if len(only) != 1 and (task is None or self.engines[self.default].task == task):
                name = self.default
        if name is not None:
            engine = self.engines.get(name)
            if engine is None:
                known = ", ".join(sorted(self.engines)) or "none"
                raise ModelNotFound(f"no model named {name!r} (loaded: {known})")
            if task is not None and engine.task != task:
                raise BadRequest(f"model {name!r} serves {engine.task}, not {task}")
            return engine
        if task is None:
            if len(self.engines) == 1:
                return next(iter(self.engines.values()))
            known = ", ".join(sorted(self.engines)) or "none"
            raise BadRequest(f"{len(self.engines)} models are served ({known}): {unnamed}")
        serving = sorted(engine_name for engine_name, engine in self.engines.items() if engine.task == task)
        if len(serving) == 1:
            return self.engines[serving[0]]
        if not serving:
            raise BadRequest(f"no loaded model serves {task}")
        raise BadRequest(f"several models serve {task}; name one in 'model': {', '.join(serving)}")

    async def start_all(self) -> None:
        """Start and warm up every engine (concurrently); readiness turns true when all are done."""
        await asyncio.gather(*(engine.start() for engine in self.engines.values()))
        self.started = True
        logger.info("serving %d model(s): %s", len(self.engines), ", ".join(sorted(self.engines)))

    async def stop_all(self, drain: bool = True) -> None:
        self.shutting_down = True
        await asyncio.gather(*(engine.stop(drain=drain) for engine in self.engines.values()))
