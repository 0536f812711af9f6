"""``--processes N``: N serving processes on one port, each loading every model, kept alive by a supervisor.

Where the model runs off the CPU (a GPU), one Python process's own work per request (HTTP, tokenizing, answers) is
the ceiling long before the device is (``benchmarks/results/gil_handoff.md``): more processes are the way past it,
as uvicorn's ``--workers`` and LitServe's ``workers_per_device`` do. The supervisor starts the processes one after
another, each when the previous one is ready (its models tuned while the others wait, and on a GPU each sees the
memory the earlier ones took). A process takes connections only once its models are warm: then it opens the port
with ``SO_REUSEPORT``, and the kernel shares new connections out among the processes' sockets by their addresses, so
a client's keep-alive connections spread over the processes (one accept queue for all would leave them wherever the
first free process took them) and a replacement warming up takes none. On a CPU each process is pinned to its share
of the CPUs, so its tuning and ONNX Runtime's threads use that share, not all of them.

Each process also serves the same app on a private Unix socket (``process-K.sock`` in a folder only this user can
open): the supervisor asks it for readiness there, and ``/metrics`` asks every sibling for its own series there and
answers for all (``Siblings``). A process that dies is replaced, on the back-off schedule of a model's workers; one
that dies before it was ever ready (a bad bundle, a missing device) stops the service with its exit status. SIGTERM or
SIGINT to the supervisor drains every process as one server would (``python -m service``); the processes end with
the supervisor if it is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import http.client
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from service.device import DeviceUnavailable, resolve_device
from service.serving import GracefulServer, configure_logging, drain_seconds, serve
from service.settings import Settings
from service.supervision import FIRST_BACKOFF_S, HEALTHY_AFTER_S, MAX_BACKOFF_S

if TYPE_CHECKING:
    from fastapi import FastAPI

    from service.core import ServiceCore

    Loaded = Callable[[ServiceCore], object]

logger = logging.getLogger(__name__)
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
READY_POLL_S = 0.2
SCRAPE_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Siblings:
    """The serving processes of one service: this one's index, how many there are and where their private sockets
    are."""

    index: int
    count: int
    folder: Path

    def socket_path(self, index: int) -> Path:
        return self.folder / f"process-{index}.sock"

    def others(self) -> list[int]:
        return [index for index in range(self.count) if index != self.index]


class UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket (a sibling's private one)."""

    def __init__(self, path: Path, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.path))


def call(path: Path, method: str, target: str, timeout: float) -> tuple[int, bytes]:
    """``method target`` to the process at Unix socket ``path``: its status and body (OSError when it cannot)."""
    connection = UnixConnection(path, timeout)
    try:
        connection.request(method, target, body=b"" if method == "POST" else None)
        response = connection.getresponse()
        return response.status, response.read()
    except http.client.HTTPException as exc:
        raise OSError(f"{path}: {exc!r}") from exc
    finally:
        connection.close()


def get(path: Path, target: str, timeout: float = SCRAPE_TIMEOUT_S) -> bytes:
    """GET ``target`` from the process at Unix socket ``path``: its body when it answers 200 (OSError otherwise)."""
    status, body = call(path, "GET", target, timeout)
    if status != 200:
        raise OSError(f"{path}: {target} answered {status}")
    return body


def on_private_socket(scope: Mapping[str, Any]) -> bool:
    """Whether an ASGI request came over a process's private Unix socket (uvicorn's ``server`` is then the socket's
    path and no port): a sibling's or the supervisor's, which only this user can send, so no API key is asked."""
    server = scope.get("server")
    return server is not None and server[1] is None


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port beside the other processes' (``SO_REUSEPORT``); the server listens on it."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    return sock


def cpu_share(index: int, count: int, cpus: list[int]) -> set[int]:
    """The CPUs process ``index`` of ``count`` runs on: every ``count``-th one from its own (one when there are fewer
    CPUs than processes)."""
    share = cpus[index::count]
    return set(share) if share else {cpus[index % len(cpus)]}


def die_with_parent(parent: int) -> None:
    """Ask Linux for SIGTERM when the supervisor dies (a SIGKILL gives it no time to stop its processes)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the request was made
        os._exit(0)


def process_main(settings: Settings, siblings: Siblings, parent: int, loaded: Loaded | None = None) -> None:
    """One serving process: its CPU share on a CPU, the models loaded, then the app (``ProcessServer``)."""
    die_with_parent(parent)
    configure_logging(settings, siblings.index)
    with contextlib.suppress(DeviceUnavailable):  # serve() reports it
        if not resolve_device(settings.device).is_cuda and hasattr(os, "sched_setaffinity"):
            cpus = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, cpu_share(siblings.index, siblings.count, cpus))
    sys.exit(serve(settings, siblings=siblings, loaded=loaded))


class ProcessServer(GracefulServer):
    """One process's server: the app on its private socket from the start, on the public port once every model is
    warm, as uvicorn would serve a socket given at start-up; only then is the process ready."""

    def __init__(self, config: uvicorn.Config, app: FastAPI, siblings: Siblings) -> None:
        super().__init__(config, app)
        self.siblings = siblings
        self._opening: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        private = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        private.bind(str(self.siblings.socket_path(self.siblings.index)))
        await super().startup(sockets=[private])
        if self.started:
            self._opening = asyncio.create_task(self._open_when_ready())

    async def _open_when_ready(self) -> None:
        registry = self.app.state.registry
        while not registry.warm:
            if self.should_exit:
                return
            await asyncio.sleep(READY_POLL_S / 4)
        config = self.config

        def protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=_loop
            )

        try:
            sock = reuse_port_socket(config.host, config.port)
            self.servers.append(await asyncio.get_running_loop().create_server(protocol, sock=sock,
                                                                              backlog=config.backlog))  # fmt: skip
        except OSError as exc:
            logger.error("process %d cannot listen on %s:%d: %s", self.siblings.index, config.host, config.port, exc)
            self.should_exit = True
            return
        registry.accepting = True  # now ready (/health/ready, bertserve_ready): the supervisor starts the next one
        logger.info("process %d takes connections on %s:%d", self.siblings.index, config.host, config.port)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._opening is not None:
            self._opening.cancel()
        await super().shutdown(sockets=sockets)


class Supervisor:
    """Starts the processes, replaces those that die and stops them all on SIGTERM or SIGINT."""

    def __init__(self, settings: Settings, folder: Path, loaded: Loaded | None = None) -> None:
        self.settings, self.folder, self.loaded = settings, folder, loaded
        self.context = multiprocessing.get_context("spawn")  # no forked copy of a parent's threads or CUDA state
        self.processes: list[BaseProcess | None] = [None] * settings.processes
        self.stopping = False
        self.deaths_in_a_row = 0
        self.last_death_at = -HEALTHY_AFTER_S

    def start(self, index: int) -> BaseProcess:
        siblings = Siblings(index, self.settings.processes, self.folder)
        with contextlib.suppress(FileNotFoundError):
            siblings.socket_path(index).unlink()  # a dead process's
        process = self.context.Process(
            target=process_main,
            args=(self.settings, siblings, os.getpid(), self.loaded),
            name=f"bertserve-{index}",
        )
        process.start()
        self.processes[index] = process
        return process

    def wait_ready(self, index: int, process: BaseProcess) -> bool:
        """Whether process ``index`` came to serve (its models warm), False when it ended first or we are stopping."""
        path = Siblings(index, self.settings.processes, self.folder).socket_path(index)
        while not self.stopping:
            if not process.is_alive():
                return False
            try:
                get(path, "/health/ready", timeout=1.0)
            except OSError:
                time.sleep(READY_POLL_S)
                continue
            logger.info("process %d of %d serves (pid %d)", index, len(self.processes), process.pid)
            return True
        return False

    def run(self) -> int:
        """Start every process in turn; then keep them alive until asked to stop. The exit status: 0 after a stop,
        else that of a process that ended before it first served."""
        for index in range(len(self.processes)):
            if self.stopping:
                break
            process = self.start(index)
            if not self.wait_ready(index, process) and not self.stopping:
                process.join()
                logger.error("process %d ended before it served (exit status %s)", index, process.exitcode)
                self.stop()
                return process.exitcode or 1
        while not self.stopping:
            alive = {process.sentinel: index for index, process in enumerate(self.processes) if process is not None}
            for sentinel in wait(list(alive), timeout=1.0):
                if not self.stopping:
                    self.replace(alive[sentinel])  # type: ignore[index]
        self.stop()
        return 0

    def replace(self, index: int) -> None:
        dead = self.processes[index]
        assert dead is not None
        dead.join()
        now = time.monotonic()
        self.deaths_in_a_row = self.deaths_in_a_row + 1 if now - self.last_death_at < HEALTHY_AFTER_S else 1
        self.last_death_at = now
        delay = (
            0.0 if self.deaths_in_a_row == 1 else min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (self.deaths_in_a_row - 2))
        )
        logger.error("process %d (pid %s) ended with status %s; replacing it in %.1f s", index, dead.pid,
                     dead.exitcode, delay)  # fmt: skip
        self.processes[index] = None
        deadline = time.monotonic() + delay
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(READY_POLL_S, deadline - time.monotonic()))
        if not self.stopping:
            self.start(index)

    def handle_signal(self, sig: int, frame: object) -> None:
        self.stopping = True

    def stop(self) -> None:
        """SIGTERM to every process (each drains as one server does), then wait for them; SIGKILL past the drain."""
        self.stopping = True
        running = [process for process in self.processes if process is not None and process.is_alive()]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)  # type: ignore[arg-type]
        deadline = time.monotonic() + drain_seconds(self.settings) + 5
        for process in running:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                logger.error("process %s did not drain in time; killing it", process.name)
                process.kill()
                process.join()


def serve_processes(settings: Settings, loaded: Loaded | None = None) -> int:
    """``python -m service --processes N``: the supervisor's life, from starting the first process to the last one's
    end. ``loaded``: as ``service.serving.serve``'s, in every process (picklable: a module's function)."""
    folder = Path(tempfile.mkdtemp(prefix="bertserve-processes-"))  # 0700: only this user reaches the processes
    supervisor = Supervisor(settings, folder, loaded)
    previous = {sig: signal.signal(sig, supervisor.handle_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    logger.info("serving with %d processes on %s:%d", settings.processes, settings.host, settings.port)
    try:
        return supervisor.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(folder, ignore_errors=True)
