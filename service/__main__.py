"""``python -m service --models DIR [--model NAME=PATH ...]``: serve bundles over HTTP.

The flags are generated from ``Settings`` (one per field, with its description and default), so
they are the ``BERTSERVE_*`` environment variables' twins; flags win. Every bundle is loaded before
the server starts, so a bad bundle stops start-up with one line naming it.
"""

from __future__ import annotations

import logging
import socket
import sys

from pydantic import ValidationError

from service.flags import settings_from_args
from service.serving import configure_logging, serve

logger = logging.getLogger("service")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["batch"]:  # a batch file through the models, no HTTP (service/batch_cli.py)
        from service.batch_cli import batch_main

        return batch_main(argv[1:])
    if argv[:1] == ["batch-join"]:  # the outputs of sharded batch runs into one
        from service.batch_cli import join_main

        return join_main(argv[1:])
    try:
        settings = settings_from_args(argv)
    except ValidationError as exc:
        print(f"bertserve: error: bad settings: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings)
    try:
        sources = settings.model_sources()
    except FileNotFoundError as exc:
        print(f"bertserve: error: {exc}", file=sys.stderr)
        return 2
    if not sources:
        print("bertserve: error: no models to serve (use --models DIR or --model NAME=PATH)", file=sys.stderr)
        return 2

    for port in (settings.port, settings.grpc_port):
        if port is not None and (problem := port_problem(settings.host, port)) is not None:
            print(f"bertserve: error: {problem}", file=sys.stderr)
            return 2

    if settings.processes > 1:  # several serving processes on one socket (service/processes.py)
        from service.processes import serve_processes

        return serve_processes(settings)
    return serve(settings)


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


if __name__ == "__main__":
    sys.exit(main())
