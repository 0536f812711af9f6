"""Models loaded and unloaded while the service runs: the Open Inference Protocol's model repository extension.

The repository is what the settings name (``--models-dir`` folders and ``--model NAME=PATH``), read again on every
call, so a bundle exported into the models folder after start-up can be loaded without a restart. Loading reads the
bundle, builds and warms its engine before it takes any request, then puts it in the registry (a model of that name
already served keeps answering until the new one is ready, then drains and stops); a bundle that fails to load leaves
the served set as it was, and the error names the reason. Unloading takes the model out of the registry first (new
requests for it get 404), then lets its queue drain: requests already in flight are answered.

Like the registry it changes, it runs on the event loop of the transport that serves the models; loading itself
(reading the bundle, building the session, tuning) runs in a thread.

With several serving processes (``service.processes``) each holds its own models: a load or unload asked of one is
done there, then asked of each other process in turn over its private socket (one at a time: each tunes alone), and
answered once all have done it. A process that could not is named in a 409 (the processes then differ until the
call is made again); a process started later, replacing one that died, serves what the settings name, as a
restarted service does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote

from contract.bundle import BundleError, read_adapters
from service.adapters import SEPARATOR, adapter_name
from service.device import DeviceUnavailable, resolve_device
from service.errors import BadRequest, Conflict, ModelNotFound
from service.metrics import ServiceMetrics
from service.settings import Settings

if TYPE_CHECKING:
    from service.engine import Engine
    from service.processes import Siblings

logger = logging.getLogger(__name__)
SIBLING_S = 900.0  # how long another serving process may take to load a model (build, tune, warm up)


def error_message(body: bytes) -> str:
    """The message of an error answer of the ``/v2`` routes (``{"error": message}``), else the body's start."""
    try:
        return str(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")


READY, UNAVAILABLE, LOADING = "READY", "UNAVAILABLE", "LOADING"  # Triton's model states


@dataclass(frozen=True, slots=True)
class RepositoryModel:
    """One model of the repository index: its name, state and why it is not served (empty when it is)."""

    name: str
    state: str
    reason: str = ""


class Registry(Protocol):
    """What the repository changes of ``service.core.ModelRegistry``."""

    engines: dict[str, Engine]
    broken: dict[str, str]
    default: str | None


class Served(Protocol):
    """What the repository needs of ``service.core.ServiceCore``."""

    settings: Settings
    metrics: ServiceMetrics
    executor: ThreadPoolExecutor

    @property
    def registry(self) -> Registry: ...

    @property
    def siblings(self) -> Siblings | None: ...

    def watch(self, name: str, engine: Engine) -> None: ...


class ModelRepository:
    def __init__(self, core: Served) -> None:
        self.core = core
        self.loading: set[str] = set()
        self._lock = asyncio.Lock()  # one load or unload at a time: each replaces the registry's engines

    def sources(self) -> dict[str, Path]:
        """Every model the repository can load: the bundles the settings name, and the LoRA adapters beside the
        served base bundles (``BASE:ADAPTER`` -> its adapter file)."""
        found = self.core.settings.model_sources()
        for base in list(self.core.registry.engines.values()):
            if SEPARATOR not in base.name:
                found |= {adapter_name(base.name, name): a.path for name, a in read_adapters(base.bundle).items()}
        return found

    def index(self, ready_only: bool = False) -> list[RepositoryModel]:
        """Every model the settings name or the service serves, by name: READY (serving), LOADING, or UNAVAILABLE
        with the reason (not loaded, or a bundle that failed to load)."""
        engines, broken = self.core.registry.engines, self.core.registry.broken
        models = []
        for name in sorted(set(self.sources()) | set(engines)):
            if name in self.loading:
                models.append(RepositoryModel(name, LOADING))
            elif name in engines:
                models.append(RepositoryModel(name, READY if engines[name].ready else LOADING))
            else:
                models.append(RepositoryModel(name, UNAVAILABLE, broken.get(name, "not loaded")))
        return [model for model in models if model.state == READY] if ready_only else models

    async def load(self, name: str, everywhere: bool = True) -> None:
        """Load (or reload) ``name`` from its bundle; ModelNotFound when the repository has no such model,
        BadRequest naming the reason when its bundle cannot be served (the served set is then unchanged).
        ``everywhere``: in every serving process (this one first), not only in this one."""
        await self._load(name)
        if everywhere:
            await self._in_siblings("load", name)

    async def _load(self, name: str) -> None:
        path = self.sources().get(name)
        if path is None:
            known = ", ".join(sorted(self.sources())) or "none"
            raise ModelNotFound(f"the model repository has no model {name!r} (it has: {known})")
        async with self._lock:
            self.loading.add(name)
            try:
                engine = await asyncio.to_thread(self._build, name, path)
                self.core.watch(name, engine)
                try:
                    await engine.start()
                except BaseException:
                    await engine.stop(drain=False)
                    self.core.metrics.unwatch(engine)
                    raise
            except (BundleError, DeviceUnavailable) as exc:
                problem = exc.problem if isinstance(exc, BundleError) else str(exc)
                self.core.registry.broken[name] = problem
                raise BadRequest(f"model {name!r} was not loaded: {problem}") from None
            finally:
                self.loading.discard(name)
            registry = self.core.registry
            previous = registry.engines.get(name)
            registry.engines = {**registry.engines, name: engine}
            registry.broken.pop(name, None)
            logger.info("loaded model %s from %s", name, path)
        if previous is not None:
            await previous.stop(drain=True)

    async def unload(self, name: str, everywhere: bool = True) -> None:
        """Stop serving ``name``: out of the registry at once, then its queued requests answered and its workers
        stopped; ModelNotFound when it is not served. ``everywhere``: as ``load``'s."""
        await self._unload(name)
        if everywhere:
            await self._in_siblings("unload", name)

    async def _unload(self, name: str) -> None:
        async with self._lock:
            registry = self.core.registry
            engine = registry.engines.get(name)
            if engine is None:
                known = ", ".join(sorted(registry.engines)) or "none"
                raise ModelNotFound(f"no model named {name!r} is loaded (loaded: {known})")
            if registry.default == name:
                registry.default = None
            registry.engines = {key: value for key, value in registry.engines.items() if key != name}
        await engine.stop(drain=True)
        self.core.metrics.unwatch(engine)
        logger.info("unloaded model %s", name)

    async def _in_siblings(self, action: str, name: str) -> None:
        """The same load or unload in every other serving process, one after another; Conflict naming those that
        could not (an unload a process had already done counts as done)."""
        from service.processes import call

        siblings = self.core.siblings
        if siblings is None:
            return
        failed = []
        for index in siblings.others():
            target = f"/v2/repository/models/{quote(name, safe='')}/{action}"
            try:
                status, body = await asyncio.to_thread(call, siblings.socket_path(index), "POST", target, SIBLING_S)
            except OSError as exc:
                failed.append(f"process {index}: {exc}")
                continue
            if status != 200 and not (action == "unload" and status == 404):
                failed.append(f"process {index}: {status} {error_message(body)}")
        if failed:
            raise Conflict(
                f"model {name!r}: {action} done in process {siblings.index}, but not in " + "; ".join(failed)
            )

    def _build(self, name: str, path: Path) -> Engine:
        from service.adapters import adapter_engine
        from service.engine import Engine

        base_name, separator, adapter = name.partition(SEPARATOR)
        if separator:
            base = self.core.registry.engines.get(base_name)
            adapters = read_adapters(base.bundle) if base is not None else {}
            if base is None or adapter not in adapters:
                raise BundleError(path, f"adapter {adapter!r} of model {base_name!r} is not there any more")
            return adapter_engine(base, adapters[adapter])
        settings = self.core.settings
        device = resolve_device(settings.device)
        return Engine.from_bundle(path, settings, name=name, executor=self.core.executor, device=device)
