"""``python -m benchmarks.studies.bare_transport``: what the HTTP transport alone costs a request.

uvicorn with the service's own HTTP protocol (``service.http_protocol``: httptools, bounded heads, head and body in
one write) in front of an ASGI app that reads the body and answers a fixed text-classification answer: no FastAPI,
no middleware, no model. wrk sends the SST-2 load's bodies at each concurrency; the report gives requests/s and the
server's CPU per request (every thread, from /proc), beside wrk's.

    python -m benchmarks.studies.bare_transport --concurrency 32,128 --out benchmarks/results/bare_transport
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks import loadgen, servers
from benchmarks.datasets import REPO_ROOT, SCRATCH_DIR
from benchmarks.loads import bertserve_loads
from benchmarks.report import load_average, write_report

log = logging.getLogger("benchmarks.studies.bare_transport")
LOG_DIR = SCRATCH_DIR / "bare-transport-logs"
ANSWER = b'[{"label":"POSITIVE","score":0.9998}]'


async def fixed_answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Read the whole body, answer ``ANSWER``: the least an ASGI app can do with a request."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = [(b"content-length", str(len(ANSWER)).encode()), (b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER})


def serve(port: int) -> None:
    import uvicorn

    from service.http_protocol import bounded_headers_protocol

    uvicorn.run(fixed_answer, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                http=bounded_headers_protocol(64 << 10))  # fmt: skip


def measure(concurrency: list[int], duration_s: float) -> list[dict[str, Any]]:
    bodies = loadgen.write_bodies(bertserve_loads("sst2", "m")[0].bodies, LOG_DIR / "bodies-sst2.jsonl")
    port = servers.free_port()
    command = [sys.executable, "-m", "benchmarks.studies.bare_transport", "--serve", str(port)]
    points = []
    with servers.running("bare-transport", command, port, "/", LOG_DIR) as server:
        url = server.base_url + "/v1/text-classification"
        for clients in concurrency:
            loadgen.run_wrk(url, bodies, clients, 2.0)
            cpu_before = server.cpu_seconds()
            result = loadgen.run_wrk(url, bodies, clients, duration_s)
            cpu = server.cpu_seconds() - cpu_before
            requests = max(1, result.requests)
            points.append({"concurrency": clients, "requests_per_s": round(result.requests / result.duration_s, 1),
                           "server_cpu_ms_per_request": round(1000 * cpu / requests, 4),
                           "client_cpu_ms_per_request": round(1000 * result.client_cpu_s / requests, 4),
                           "errors": result.errors})  # fmt: skip
    return points


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# What the HTTP transport alone costs a request (benchmarks.studies.bare_transport)",
        "",
        f"Command: `{report['command']}`; tree {report['tree']}; uvicorn with `service.http_protocol` and an ASGI app "
        f"that reads the body and answers a fixed body (no FastAPI, middleware or model); wrk with the SST-2 load's "
        f"bodies, {report['duration_s']:g} s a point. Load average at start {report['load_avg']['start']}, at end "
        f"{report['load_avg']['end']}.",
        "",
        "| c | requests/s | server CPU ms/request | wrk CPU ms/request | errors |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in report["points"]:
        lines.append(f"| {p['concurrency']} | {p['requests_per_s']:,.0f} | {p['server_cpu_ms_per_request']:.3f} | "
                     f"{p['client_cpu_ms_per_request']:.3f} | {p['errors']} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.bare_transport", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")], default=[32, 128])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--out", type=Path, help="output prefix (.json and .md are added)")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)  # the server side, in a child
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    if args.out is None:
        parser.error("--out is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    at_start = os.getloadavg()
    points = measure(args.concurrency, args.duration)
    from benchmarks.ab import revision

    command = "python -m benchmarks.studies.bare_transport " + " ".join(sys.argv[1:] if argv is None else argv)
    report = {"command": command, "tree": revision(REPO_ROOT), "duration_s": args.duration, "points": points,
              "load_avg": load_average(at_start)}  # fmt: skip
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
