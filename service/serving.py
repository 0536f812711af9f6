"""Serving one process over HTTP: its models loaded, uvicorn over the app, a graceful stop on SIGTERM.

``python -m service`` (``service.__main__``) serves this way, alone or as each of several processes
(``service.processes``).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import uvicorn

from contract.bundle import BundleError
from service.metrics import JsonFormatter
from service.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from service.core import ServiceCore
    from service.processes import Siblings


def serve(
    settings: Settings, siblings: Siblings | None = None, loaded: Callable[[ServiceCore], object] | None = None
) -> int:
    """Load the models and serve them over HTTP on the settings' host and port until SIGTERM, alone or as one process
    of several (``service.processes``). ``loaded`` sees the core once its models are loaded, before any start (a
    study's stand-in for the device)."""
    from service.app import create_app
    from service.core import ServiceCore
    from service.device import DeviceUnavailable
    from service.http_protocol import bounded_headers_protocol

    core = ServiceCore(settings)
    try:
        core.load()
    except DeviceUnavailable as exc:
        print(f"bertserve: error: {exc}", file=sys.stderr)
        return 1
    except BundleError as exc:
        name = next((name for name, path in settings.model_sources().items() if str(path) == exc.path), exc.path)
        print(f"bertserve: error: cannot serve model {name}: {exc} (--skip-broken serves the others)", file=sys.stderr)
        return 1
    if not core.registry.engines:
        print(f"bertserve: error: no model could be loaded: {', '.join(sorted(core.registry.broken))}", file=sys.stderr)
        return 1

    core.siblings = siblings
    core.registry.accepting = siblings is None  # one of several takes connections once warm (ProcessServer)
    if loaded is not None:
        loaded(core)
    app = create_app(core=core)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,  # the service writes its own line per request (service.metrics)
        log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
        timeout_graceful_shutdown=drain_seconds(settings),
        timeout_keep_alive=settings.keep_alive_s,
        http=bounded_headers_protocol(settings.max_header_bytes),
    )
    if siblings is None:
        GracefulServer(config, app).run()
    else:
        from service.processes import ProcessServer

        ProcessServer(config, app, siblings).run()
    return 0


def configure_logging(settings: Settings, process: int | None = None) -> None:
    """The log's level and format; ``process``: the index of one serving process of several, in every line."""
    named = "%(name)s" if process is None else f"%(name)s[{process}]"
    logging.basicConfig(level=settings.log_level.upper(), format=f"%(asctime)s %(levelname)s {named}: %(message)s")
    if settings.log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter(process))


def drain_seconds(settings: Settings) -> int:
    """How long in-flight work may take after SIGTERM: the request timeout plus a margin to answer."""
    return int(settings.timeout_s) + 5


class GracefulServer(uvicorn.Server):
    """On SIGTERM/SIGINT readiness turns 503 at once; uvicorn then stops accepting and waits for
    in-flight requests, and the lifespan drains the queues and stops the workers. The process then
    exits 0: uvicorn's own handler would re-raise the signal afterwards (exit 143 for a clean drain)."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.app = app

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.app.state.registry.shutting_down = True
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
