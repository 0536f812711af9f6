"""``python -m service --models DIR [--model NAME=PATH ...]``: serve bundles over HTTP.

Flags mirror the settings (``BERTSERVE_*`` environment variables); flags win. Every bundle is
loaded before the server starts, so a bad bundle stops start-up with one line naming it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from pydantic import ValidationError

from model_export.bundle import BundleError
from service.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

logger = logging.getLogger("service")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m service", description="Serve fine-tuned BERT bundles over HTTP.")
    parser.add_argument("--models", dest="models_dir", type=Path, help="serve every bundle folder under DIR")
    parser.add_argument("--model", dest="models", action="append", metavar="NAME=PATH", help="add one bundle")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--intra-op-threads", type=int)
    parser.add_argument("--max-batch-tokens", type=int)
    parser.add_argument("--max-batch-size", type=int)
    parser.add_argument("--max-wait-ms", type=float)
    parser.add_argument("--batch-overhead-tokens", type=float)
    parser.add_argument("--max-queue", type=int)
    parser.add_argument("--timeout-s", type=float)
    parser.add_argument("--max-body-bytes", type=int)
    parser.add_argument("--max-inputs-per-request", type=int)
    parser.add_argument("--prepare-threads", type=int)
    parser.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=None)
    return parser


def settings_from_args(argv: list[str] | None = None) -> Settings:
    args = build_parser().parse_args(argv)
    overrides: dict[str, Any] = {key: value for key, value in vars(args).items() if value is not None}
    return Settings(**overrides)


def main(argv: list[str] | None = None) -> int:
    try:
        settings = settings_from_args(argv)
    except ValidationError as exc:
        print(f"bertserve: error: bad settings: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        sources = settings.model_sources()
    except FileNotFoundError as exc:
        print(f"bertserve: error: {exc}", file=sys.stderr)
        return 2
    if not sources:
        print("bertserve: error: no models to serve (use --models DIR or --model NAME=PATH)", file=sys.stderr)
        return 2

    from service.app import create_app
    from service.registry import load_engines

    try:
        engines = load_engines(sources, settings)
    except BundleError as exc:
        name = next((name for name, path in sources.items() if str(path) == exc.path), exc.path)
        print(f"bertserve: error: cannot serve model {name}: {exc}", file=sys.stderr)
        return 1

    app = create_app(settings, engines=engines)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.access_log,
        timeout_graceful_shutdown=drain_seconds(settings),
    )
    GracefulServer(config, app).run()
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
