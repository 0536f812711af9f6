"""``python -m service --models DIR [--model NAME=PATH ...]``: serve bundles over HTTP.

The flags are generated from ``Settings`` (one per field, with its description and default), so
they are the ``BERTSERVE_*`` environment variables' twins; flags win. Every bundle is loaded before
the server starts, so a bad bundle stops start-up with one line naming it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import socket
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

import uvicorn
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from contract.bundle import BundleError
from service.access_log import JsonFormatter
from service.settings import Settings

if TYPE_CHECKING:
    from fastapi import FastAPI

logger = logging.getLogger("service")


# Flags whose spelling is not the field's name with dashes (the first is the documented one).
FLAG_NAMES: dict[str, tuple[str, ...]] = {
    "models_dir": ("--models", "--models-dir"),
    "models": ("--model",),
    "api_keys": ("--api-key",),
    "cors_allow_origins": ("--cors-allow-origin",),
}
METAVARS: dict[str, str] = {
    "models_dir": "DIR", "models": "NAME=PATH", "api_keys": "KEY", "cors_allow_origins": "ORIGIN",
}  # fmt: skip
TYPE_METAVARS: dict[Any, str] = {int: "N", float: "NUM", Path: "PATH"}


def build_parser() -> argparse.ArgumentParser:
    """One flag per ``Settings`` field (name, help, default and type come from the field), so they cannot drift.

    Every flag defaults to None: only flags given override the environment and the field defaults.
    """
    parser = argparse.ArgumentParser(
        prog="python -m service",
        description="Serve fine-tuned BERT bundles over HTTP. "
        "`python -m service batch INPUT --out OUTPUT ...` runs an OpenAI batch file through them without HTTP.",
    )
    for name, field in Settings.model_fields.items():
        flags = FLAG_NAMES.get(name, ("--" + name.replace("_", "-"),))
        kind = _flag_type(name, field.annotation)
        options: dict[str, Any] = {"dest": name, "default": None, "help": _flag_help(name, field)}
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif get_origin(kind) is list:
            (item,) = get_args(kind)
            options.update(action="append", type=item, metavar=METAVARS.get(name, "VALUE"))
        elif get_origin(kind) is Literal:
            options["choices"] = list(get_args(kind))
        else:
            options.update(type=kind, metavar=METAVARS.get(name, TYPE_METAVARS.get(kind)))
        parser.add_argument(*flags, **options)
    return parser


def _flag_type(name: str, annotation: Any) -> Any:
    """The field's type without ``| None``; only types the flags know how to parse."""
    if get_origin(annotation) in (Union, types.UnionType):
        options = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(options) == 1:
            annotation = options[0]
    if annotation in (bool, int, float, str, Path) or get_origin(annotation) is Literal or annotation == list[str]:
        return annotation
    raise TypeError(f"setting {name} has type {annotation}, which no flag parses")


def _flag_help(name: str, field: FieldInfo) -> str:
    default = field.get_default(call_default_factory=True)
    shown = "none" if default is None or default == [] else str(default)
    env = f"{Settings.model_config.get('env_prefix', '')}{name}".upper()
    repeat = " Repeat the flag for more." if get_origin(field.annotation) is list else ""
    text = f"{field.description or ''}{repeat} (default: {shown}; env {env})".strip()
    return text.replace("%", "%%")  # argparse %-formats help strings


def settings_from_args(argv: list[str] | None = None) -> Settings:
    args = build_parser().parse_args(argv)
    overrides: dict[str, Any] = {key: value for key, value in vars(args).items() if value is not None}
    return Settings(**overrides)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["batch"]:  # a batch file through the models, no HTTP (service/batch_cli.py)
        from service.batch_cli import batch_main

        return batch_main(argv[1:])
    try:
        settings = settings_from_args(argv)
    except ValidationError as exc:
        print(f"bertserve: error: bad settings: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
    try:
        sources = settings.model_sources()
    except FileNotFoundError as exc:
        print(f"bertserve: error: {exc}", file=sys.stderr)
        return 2
    if not sources:
        print("bertserve: error: no models to serve (use --models DIR or --model NAME=PATH)", file=sys.stderr)
        return 2

    if (problem := port_problem(settings.host, settings.port)) is not None:
        print(f"bertserve: error: {problem}", file=sys.stderr)
        return 2

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
        name = next((name for name, path in sources.items() if str(path) == exc.path), exc.path)
        print(f"bertserve: error: cannot serve model {name}: {exc} (--skip-broken serves the others)", file=sys.stderr)
        return 1
    if not core.registry.engines:
        print(f"bertserve: error: no model could be loaded: {', '.join(sorted(core.registry.broken))}", file=sys.stderr)
        return 1

    app = create_app(core=core)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,  # the service writes its own line per request (service.access_log)
        log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
        timeout_graceful_shutdown=drain_seconds(settings),
        http=bounded_headers_protocol(settings.max_header_bytes),
    )
    GracefulServer(config, app).run()
    return 0


def port_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (taken, not allowed), found before any model loads."""
    if port == 0:
        return None
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror}"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a listener still blocks
        try:
            probe.bind(address)
        except OSError as exc:
            return f"cannot listen on {host}:{port} ({exc.strerror}); choose another port: --port N (make serve PORT=N)"
    return None


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
