"""``python -m benchmarks.studies.lone_request``: where a lone request's time goes, stage by stage, against the raw
batch-1 call it is held to (issue 46: c=1 p50 within 0.5 ms of raw batch-1).

The server (``python -m service``, default settings) runs with timestamps taken at the stage boundaries of the
serving path (the clock is ``time.perf_counter_ns``, CLOCK_MONOTONIC, the same in every process here); one client
on one kept-alive connection sends one SST-2 dev sentence a request, each as soon as the last answer arrived (wrk
at c=1), and stamps each request's send and its answer's last byte. Each request's server stamps are the ones
between its two client stamps, so every gap is
measured on the request itself (``STAGES`` names each stamp and what the gap before it holds: HTTP parse and the
middlewares, JSON and validation, tokenize, the hand-off to the worker thread, pad, the run, the hand-off back,
post-process and JSON, the write). A stamp costs about a microsecond.

Between server rounds, in this process: the raw loop's batch-1 call (tokenize, pad, run:
``benchmarks.overhead.batch_one_ms``) back to back and paced (each call after 1 ms asleep), which the run and the
answer are read against; and the task unit's prepare (tokenize) of one request's body, back to back and right
after a batch-1 run of the model: a lone request's Python runs on caches the run just went through.

    python -m benchmarks.studies.lone_request --model sst2=benchmarks/scratch/sst2-fp32 \\
        --out benchmarks/results/lone_request-fp32
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import overhead, servers
from benchmarks.datasets import SCRATCH_DIR
from benchmarks.loads import ROUTES, bertserve_loads, bertserve_path, load_inputs
from benchmarks.raw_ort import open_session
from benchmarks.report import load_average, page, shown_path, table, tree_commit, write_report
from contract.bundle import read_bundle
from contract.onnx_io import pad_token_rows
from service.api.bodies import JSON_MEDIA_TYPE, validated_json_body
from service.api.protocols import INFERENCE_ROUTES
from service.engine_load import load_context
from service.tasks import BY_TASK

log = logging.getLogger("benchmarks.studies.lone_request")
LOG_DIR = SCRATCH_DIR / "lone-request-logs"
STAMPS_ENV = "BERTSERVE_STUDY_STAMPS"
# (stage name, what happens before it): in request order; a stage absent from a request leaves its gap out
STAGES = (
    ("read", "kernel and loopback: the request's bytes reach the server"),
    ("entry", "httptools parse, ASGI scope, the middlewares"),
    ("engine", "body, JSON, validation, the task's request, engine selection"),
    ("prepare", "the engine's admission checks"),
    ("prepared", "tokenize (the task unit's prepare)"),
    ("queued", "token checks, the decode reserve"),
    ("submitted", "queue the rows (lock, admission, wake a worker), the deadline's timer"),
    ("taken", "the worker thread wakes (the GIL from the event loop) and takes the batch"),
    ("run_start", "pad, the core share's turn"),
    ("run_end", "ONNX Runtime run"),
    ("completing", "the core share's turn back, split rows"),
    ("completed", "hand the rows to their requests, wake the event loop (call_soon_threadsafe)"),
    ("polling", "the batch observer (metrics)"),
    ("resolving", "the worker parks (the GIL to the event loop), the loop wakes and runs the callback"),
    ("resumed", "the future's result, the coroutine resumes"),
    ("send", "post-process, the answer's JSON"),
    ("written", "the response's ASGI messages, the transport write"),
    ("answered", "loopback, the client reads the answer"),
)
# A stage stamped more than once in a request's span counts at its first stamp, but these at their last: the last
# answer's ``written`` can come after its client read it and sent this request.
LAST_TAKEN = frozenset({"written"})


def install_stamps(path: str) -> None:
    """Wrap the serving path's stage boundaries to append (stage, ns) to one list, written to ``path`` at exit."""
    from service import batcher, engine, http_protocol, runtime, sessions
    from service.api import entry

    stamps: list[tuple[str, int]] = []
    clock = time.perf_counter_ns
    atexit.register(lambda: Path(path).write_text(json.dumps(stamps)))

    def before(owner: Any, name: str, stage: str) -> None:
        original = getattr(owner, name)

        def stamped(*args: Any, **kwargs: Any) -> Any:
            stamps.append((stage, clock()))
            return original(*args, **kwargs)

        setattr(owner, name, stamped)

    def around_async(owner: Any, name: str, start: str, end: str | None) -> None:
        original = getattr(owner, name)

        async def stamped(*args: Any, **kwargs: Any) -> Any:
            stamps.append((start, clock()))
            result = await original(*args, **kwargs)
            if end is not None:
                stamps.append((end, clock()))
            return result

        setattr(owner, name, stamped)

    def after(owner: Any, name: str, stage: str) -> None:
        original = getattr(owner, name)

        def stamped(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            stamps.append((stage, clock()))
            return result

        setattr(owner, name, stamped)

    before(http_protocol.BoundedHeadersProtocol, "data_received", "read")
    around_async(entry.InferenceEntry, "__call__", "entry", None)
    around_async(engine.Engine, "_infer", "engine", None)
    before(engine.Engine, "_prepare", "prepare")
    after(engine.Engine, "_prepare", "prepared")
    around_async(batcher.Batcher, "run", "queued", "resumed")
    after(batcher.Batcher, "submit", "submitted")
    before(batcher.Batcher, "complete", "completing")
    after(batcher.Batcher, "complete", "completed")
    before(batcher, "resolve_requests", "resolving")
    before(runtime.Lanes, "next_batch", "polling")
    after(runtime.Lanes, "next_batch", "taken")
    before(sessions.OrtRunner, "run", "run_start")
    after(sessions.OrtRunner, "run", "run_end")
    around_async(entry, "send_body", "send", "written")


def serve(argv: list[str]) -> int:
    install_stamps(os.environ[STAMPS_ENV])
    from service.__main__ import main as service_main

    return service_main(argv)


def request_bytes(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def read_answer(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.lower().split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.startswith(b"content-length"))
    while len(body) < length:
        body += conn.recv(65536)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"answered {head.splitlines()[0]!r}")
    return body


def client_round(port: int, path: str, bodies: list[bytes], seconds: float) -> list[tuple[int, int]]:
    """Each request's (sent, answered) ns, one connection, back to back for ``seconds``."""
    spans: list[tuple[int, int]] = []
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        deadline = time.perf_counter() + seconds
        for body in itertools.cycle(bodies):
            if time.perf_counter() > deadline:
                break
            sent = time.perf_counter_ns()
            conn.sendall(body)
            read_answer(conn)
            spans.append((sent, time.perf_counter_ns()))
    return spans


def timelines(spans: list[tuple[int, int]], stamps: list[tuple[str, int]]) -> list[dict[str, float]]:
    """Each request's stage times (ms from its send), from the server stamps inside its client span."""
    ordered = sorted(stamps, key=lambda item: item[1])
    index, found = 0, []
    for sent, answered in spans:
        while index < len(ordered) and ordered[index][1] < sent:
            index += 1
        marks: dict[str, float] = {}
        probe = index
        while probe < len(ordered) and ordered[probe][1] <= answered:
            stage, at = ordered[probe]
            if stage in LAST_TAKEN or stage not in marks:
                marks[stage] = (at - sent) / 1e6
            probe += 1
        marks["answered"] = (answered - sent) / 1e6
        found.append(marks)
    return found


def stage_table(found: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Per stage seen in most requests: the median time from the send, and the median gap from the stage before."""
    rows = []
    for position, (stage, what) in enumerate(STAGES):
        times = [marks[stage] for marks in found if stage in marks]
        if len(times) < len(found) / 2:
            continue
        gaps = []
        for marks in (marks for marks in found if stage in marks):
            earlier = [marks[name] for name, _ in STAGES[:position] if name in marks]
            gaps.append(marks[stage] - (earlier[-1] if earlier else 0.0))
        at, gap = statistics.median(times), statistics.median(gaps)
        rows.append({"stage": stage, "what": what, "at_ms": at, "gap_ms": gap})
    return rows


def measure(args: argparse.Namespace, name: str, bundle: Path, task: str) -> dict[str, Any]:
    path = bertserve_path(task)
    inputs = load_inputs(task)
    load_bodies = bertserve_loads(task, name)[0].bodies
    bodies = [request_bytes(path, json.dumps(body).encode()) for body in load_bodies]
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    rounds = []
    for number in range(args.rounds):
        stamps_path = LOG_DIR / f"stamps-{name}-{number}.json"
        port = servers.free_port()
        command = [sys.executable, "-m", "benchmarks.studies.lone_request", "--serve", "--model", f"{name}={bundle}"]
        command += ["--port", str(port)]
        env = {**os.environ, **servers.OFFLINE_ENV, STAMPS_ENV: str(stamps_path)}
        log_path = LOG_DIR / f"server-{name}-{number}.log"
        with log_path.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
            try:
                servers.wait_ready(f"http://127.0.0.1:{port}/health/ready", process, log_path, 300)
                client_round(port, path, bodies, 2.0)  # warm-up
                spans = client_round(port, path, bodies, args.seconds)
            finally:
                process.send_signal(2)
                process.wait(60)
        stamps = [(str(stage), int(at)) for stage, at in json.loads(stamps_path.read_text())]
        found = timelines(spans, stamps)
        back_to_back = overhead.batch_one_ms(bundle, ROUTES[task], inputs, args.seconds)
        paced = overhead.batch_one_ms(bundle, ROUTES[task], inputs, args.seconds, overhead.PACE_S)
        prepare = prepare_us(bundle, path, load_bodies)
        rounds.append(
            {"requests": len(found), "stages": stage_table(found), "raw_ms": back_to_back, "paced_ms": paced,
             "prepare_us": prepare}
        )  # fmt: skip
        log.info("%s round %d: %d requests", name, number, len(found))
    return {"model": name, "bundle": shown_path(bundle), "load": task, "route": path, "rounds": rounds}


def prepare_us(bundle: Path, path: str, bodies: list[dict[str, Any]], calls: int = 1000) -> dict[str, float]:
    """The task unit's prepare of one request (median us): back to back, and right after a batch-1 run."""
    route = next(route for route in INFERENCE_ROUTES if route.path == path and route.body is not None)
    assert route.body is not None
    requests = [validated_json_body(route.body, json.dumps(body).encode(), JSON_MEDIA_TYPE) for body in bodies[:200]]
    handler = BY_TASK[requests[0].task].handler
    assert handler is not None
    context = load_context(read_bundle(bundle))
    tasks = [request.to_task() for request in requests]
    session = open_session(bundle / "model.onnx")
    padded = pad_token_rows(handler.prepare(context, *tasks[0])[0].sequences, context.pad_token_id)
    feeds = {node.name: padded.feeds[node.name] for node in session.get_inputs()}
    found: dict[str, float] = {}
    for label, between in (("back_to_back", None), ("after_a_run", feeds)):
        times = []
        for call in range(calls):
            if between is not None:
                session.run(None, between)
            started = time.perf_counter_ns()
            handler.prepare(context, *tasks[call % len(tasks)])
            times.append((time.perf_counter_ns() - started) / 1000)
        found[label] = statistics.median(times)
    return found


def markdown(report: dict[str, Any]) -> str:
    blocks = []
    for model in report["models"]:
        last = model["rounds"][-1]
        stages: dict[str, list[dict[str, Any]]] = {row["stage"]: [] for row in last["stages"]}
        for one in model["rounds"]:
            for row in one["stages"]:
                stages.setdefault(row["stage"], []).append(row)
        rows = []
        for stage, found in stages.items():
            gap = statistics.median(row["gap_ms"] for row in found)
            at = statistics.median(row["at_ms"] for row in found)
            rows.append([f"`{stage}`", found[0]["what"], f"{gap:.3f}", f"{at:.3f}"])
        raw = statistics.median(one["raw_ms"] for one in model["rounds"])
        paced = statistics.median(one["paced_ms"] for one in model["rounds"])
        run = statistics.median(row["gap_ms"] for row in stages.get("run_end", [{"gap_ms": 0.0}]))
        answered = statistics.median(row["at_ms"] for row in stages["answered"])
        hot = statistics.median(one["prepare_us"]["back_to_back"] for one in model["rounds"])
        cold = statistics.median(one["prepare_us"]["after_a_run"] for one in model["rounds"])
        blocks.append([f"## `{model['route']}`, model `{model['model']}` ({model['bundle']})", ""])
        blocks.append(table(["stage", "what the gap before it holds", "gap ms (median)", "at ms (median)"], rows))
        blocks.append(
            [
                "",
                f"Raw batch-1 (tokenize, pad, run): {raw:.3f} ms back to back, {paced:.3f} ms paced (1 ms asleep "
                f"before each call). The server's run alone: {run:.3f} ms; its answer {answered:.3f} ms after the "
                f"send: **+{answered - paced:.3f} ms** over paced raw, **+{answered - raw:.3f}** over back to back; "
                f"outside the run {answered - run:.3f} ms.",
                "",
                f"The task unit's prepare (tokenize) of one request, in process: {hot:.0f} us back to back, "
                f"{cold:.0f} us right after a batch-1 run.",
                "",
            ]
        )
    intro = (
        f"Tree {report['commit']}; {report['rounds']} rounds of {report['seconds']:g} s, one client, one connection, "
        f"each request sent when the last answer arrived; medians over requests, then over rounds. Load average at "
        f"start {report['load_average']['start']}, at end {report['load_average']['end']}."
    )
    return page("A lone request, stage by stage", intro, *blocks)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--serve":
        return serve(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, help="NAME=BUNDLE; the load: sst2 or embeddings")
    parser.add_argument("--load", default=None, help="the load for every model (default: the model's name)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    started = os.getloadavg()
    models = []
    for spec in args.model:
        name, _, bundle = spec.partition("=")
        models.append(measure(args, name, Path(bundle), args.load or name))
    report = {
        "commit": tree_commit(),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "models": models,
        "load_average": load_average(started),
    }
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
