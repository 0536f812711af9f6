"""Overload check: goodput at 2x and 5x the server's capacity, with short and long inputs, bounded in time,
count and connections.

For each load (``benchmarks.overload_loads``: ``short``, ``qa-long``, ``embeddings-long``, ``ner-long``) it starts
``python -m service`` on 127.0.0.1 with that load's one model, measures the capacity closed-loop at
``--measure-concurrency`` (32) clients (200 answers/s; or takes ``--capacity``), then for each ``--overload``
multiple sends requests open-loop at that multiple of the capacity for ``--duration`` seconds over at most
``--max-connections`` keep-alive connections, opened and answered once before the load as a client pool's would
be (``--no-preconnect``: opened during the burst). A send due while every connection is busy is skipped and
counted (``client_skipped``): the client never queues without bound. ``--storm-concurrency N`` adds a run of N
closed-loop clients that send again at once after a 429 (Retry-After ignored). Reported per run (``overload_report``):
goodput against capacity, p50/p99 of the admitted (200) requests against the deadline, the answers by status
(200, 429, 413, 5xx), Retry-After of the 429s, connection errors, the server's RSS before the load and at 10 %
(start), 50 % and the end of it, the load average at start and end, the server's refusals by stage
(``bertserve_shed_requests_total``: before tokenizing, or by the batcher after it), and whether the targets hold.

    python -m benchmarks.overload --load all --duration 120                 # every load, models found or built
    python -m benchmarks.overload --load qa-long --model qa=models/qa --duration 120
    python -m benchmarks.overload --load short --model sst2=models/sentiment --duration 600 --overload 2

Results go to benchmarks/results/overload-long.{json,md} unless ``--out`` names another prefix; loads already in
that file and not run now are kept, so loads can be run one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shlex
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from benchmarks import servers
from benchmarks.datasets import RESULTS_DIR, SCRATCH_DIR
from benchmarks.overload_client import closed_loop, no_backoff_after_429, open_loop, rss_bytes, wait_idle
from benchmarks.overload_loads import (
    LOADS,
    LONG_LOADS,
    LoadSpec,
    bundle_max_length,
    bundle_tokenizer,
    default_bundle,
    describe_bodies,
    request_bodies,
)
from benchmarks.overload_report import (
    RSS_START_FRACTION,
    all_targets_met,
    markdown,
    merge,
    retry_after_distribution,
    summarise_run,
)

log = logging.getLogger("benchmarks.overload")
RESULTS_PREFIX = RESULTS_DIR / "overload-long"
LOG_DIR = SCRATCH_DIR / "overload-logs"
DEFAULT_DEADLINE_S = 30.0  # service.settings' timeout_s default


def load_average() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def deadline_of(server_args: str) -> float:
    """The deadline the server runs with: --timeout-s in the server args, else $BERTSERVE_TIMEOUT_S, else 30 s."""
    words = shlex.split(server_args)
    for index, word in enumerate(words):
        if word.startswith("--timeout-s="):
            return float(word.split("=", 1)[1])
        if word == "--timeout-s" and index + 1 < len(words):
            return float(words[index + 1])
    return float(os.environ.get("BERTSERVE_TIMEOUT_S") or DEFAULT_DEADLINE_S)


def selected_loads(value: str) -> list[str]:
    names: list[str] = []
    for word in value.split(","):
        expanded = {"all": ["short", *LONG_LOADS], "long": list(LONG_LOADS)}.get(word, [word])
        names += [name for name in expanded if name not in names]
    unknown = [name for name in names if name not in LOADS]
    if unknown:
        raise ValueError(f"unknown load(s) {unknown}; known: {sorted(LOADS)}, all, long")
    return names


def model_paths(pairs: list[str], loads: list[str]) -> dict[str, tuple[str, Path]]:
    """role -> (served name, bundle). NAME=PATH with NAME a role (sst2, qa, ner, embeddings); with one load, any
    NAME is that load's model, served under NAME."""
    chosen: dict[str, tuple[str, Path]] = {}
    roles = {LOADS[name].role for name in loads}
    for pair in pairs:
        name, _, path = pair.partition("=")
        if not path:
            raise ValueError(f"--model {pair!r}: expected NAME=PATH")
        role = name if name in roles else (LOADS[loads[0]].role if len(loads) == 1 else None)
        if role is None:
            raise ValueError(f"--model {pair!r}: NAME must be one of the roles {sorted(roles)} with several loads")
        chosen[role] = (name, Path(path))
    return chosen


async def measure_load(
    args: argparse.Namespace, load: LoadSpec, bodies: list[bytes], server: servers.Server, port: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The capacity at c=32 (or --capacity), then one open-loop run per --overload multiple."""
    started_load = load_average()
    if args.capacity is not None:
        capacity: dict[str, Any] = {"answers_per_s": args.capacity, "source": "given (--capacity)", "statuses": {}}
    else:
        warmup = load.warmup_s if args.measure_warmup_s is None else args.measure_warmup_s
        seconds = load.measure_s if args.measure_s is None else args.measure_s
        rate, tally = await closed_loop("127.0.0.1", port, load.path, bodies, args.measure_concurrency, warmup,
                                        seconds, args.timeout)  # fmt: skip
        if not rate:
            raise RuntimeError(f"{load.name}: no capacity measured (answers {dict(tally.statuses)}): measure longer")
        capacity = {
            "answers_per_s": rate,
            "source": f"measured over {seconds:g} s after {warmup:g} s of warm-up",
            "statuses": dict(sorted(tally.statuses.items())),
            "retry_after_s": retry_after_distribution(tally.retry_after),
            "warmup_s": warmup,
            "measure_s": seconds,
        }
        log.info("%s: capacity at c=%d %.2f answers/s", load.name, args.measure_concurrency, rate)
    capacity.update(concurrency=args.measure_concurrency, load_avg={"start": started_load, "end": load_average()})
    runs = []
    for factor in args.overload:
        settled = await wait_idle(server.pid, args.settle_s)  # what the previous phase left running ends first
        rss = {"before_load": rss_bytes(server.pid)}
        at_start, shed_before = load_average(), shed_counts(port)

        def sample(name: str, into: dict[str, int] = rss) -> Any:
            return lambda: into.__setitem__(name, rss_bytes(server.pid))

        tally, started = await open_loop(
            "127.0.0.1", port, load.path, bodies, capacity["answers_per_s"] * factor, args.duration,
            args.max_connections, args.timeout, {RSS_START_FRACTION: sample("start"), 0.5: sample("middle")},
            args.preconnect,
        )  # fmt: skip
        rss.setdefault("start", rss["before_load"])
        rss.setdefault("middle", rss["start"])
        rss["end"] = rss_bytes(server.pid)
        run = summarise_run(tally, started, args.duration, capacity["answers_per_s"], factor, args.deadline, rss)
        run.update(load_avg={"start": at_start, "end": load_average()}, waited_for_idle_s=settled)
        run["shed"] = shed_delta(port, shed_before)
        log.info("%s at %gx: %s, goodput %s answers/s", load.name, factor, run["by_class"], run["goodput_rps"])
        runs.append(run)
    if args.storm_concurrency:
        runs.append(await retry_storm(args, load, bodies, server, port, capacity["answers_per_s"]))
    return capacity, runs


async def retry_storm(
    args: argparse.Namespace, load: LoadSpec, bodies: list[bytes], server: servers.Server, port: int, capacity: float
) -> dict[str, Any]:
    """``--storm-concurrency`` closed-loop clients that send again at once after a 429 (Retry-After ignored), for
    ``--duration`` s: goodput from 10 % of the run to its end, as an overload run's."""
    settled = await wait_idle(server.pid, args.settle_s)
    rss, at_start, shed_before = {"start": rss_bytes(server.pid)}, load_average(), shed_counts(port)
    started = time.perf_counter()
    warmup = RSS_START_FRACTION * args.duration
    _, tally = await closed_loop("127.0.0.1", port, load.path, bodies, args.storm_concurrency, warmup,
                                 args.duration - warmup, args.timeout, 1.0, no_backoff_after_429)  # fmt: skip
    rss["end"] = rss_bytes(server.pid)
    factor = args.storm_concurrency  # stands for the run in the report: its label says what it is
    run = summarise_run(tally, started, args.duration, capacity, factor, args.deadline, rss)
    run.update(load_avg={"start": at_start, "end": load_average()}, waited_for_idle_s=settled)
    run.update(storm_concurrency=args.storm_concurrency, shed=shed_delta(port, shed_before))
    log.info("%s, %d clients ignoring Retry-After: %s, goodput %s answers/s", load.name, args.storm_concurrency,
             run["by_class"], run["goodput_rps"])  # fmt: skip
    return run


SHED_LINE = "bertserve_shed_requests_total{"


def shed_counts(port: int) -> Counter[str]:
    """The server's refused or dropped requests by reason (``bertserve_shed_requests_total``), all models."""
    counts: Counter[str] = Counter()
    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text.splitlines():
        if line.startswith(SHED_LINE) and 'reason="' in line:
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            counts[reason] += int(float(line.rsplit(" ", 1)[1]))
    return counts


def shed_delta(port: int, before: Counter[str]) -> dict[str, int]:
    after = shed_counts(port)
    return {reason: after[reason] - before[reason] for reason in after if after[reason] != before[reason]}


def run_load(args: argparse.Namespace, name: str, models: dict[str, tuple[str, Path]]) -> dict[str, Any]:
    load = LOADS[name]
    served, bundle = models.get(load.role) or (load.role, default_bundle(load.role))
    tokenizer = bundle_tokenizer(bundle)
    bodies = request_bodies(load, served, tokenizer, args.pool)
    encoded = [json.dumps(body).encode() for body in bodies]
    facts = {"name": name, "path": load.path, "what": load.what, "model": str(bundle),
             "max_length": bundle_max_length(bundle), "bodies": describe_bodies(bodies, tokenizer)}  # fmt: skip
    port = servers.free_port()
    command = servers.bertserve_command({served: bundle}, port)
    command += ["--host", "127.0.0.1", "--log-level", "warning", *shlex.split(args.server_args)]
    with servers.running(f"overload-{name}", command, port, "/health/ready", LOG_DIR) as server:
        capacity, runs = asyncio.run(measure_load(args, load, encoded, server, port))
    return {
        "load": facts,
        "command": args.command,
        "server_args": args.server_args,
        "deadline_s": args.deadline,
        "capacity": capacity,
        "runs": runs,
        "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.overload", description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", default="short", help=f"comma-separated loads of {sorted(LOADS)}, or all / long")
    parser.add_argument(
        "--model", action="append", default=[], metavar="ROLE=PATH",
        help="a load's bundle; roles: sst2 (short), qa, ner, embeddings (default: found or built)",
    )  # fmt: skip
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of each overload run")
    parser.add_argument("--overload", type=lambda v: [float(x) for x in v.split(",")], default=[2.0, 5.0],
                        help="sending rates as multiples of the capacity (default 2,5)")  # fmt: skip
    parser.add_argument("--capacity", type=float, default=None, help="answers/s (default: measured)")
    parser.add_argument("--measure-s", type=float, default=None, help="capacity window (default: the load's)")
    parser.add_argument("--measure-warmup-s", type=float, default=None, help="warm-up before it (default: the load's)")
    parser.add_argument("--measure-concurrency", type=int, default=32, help="clients of the capacity measurement")
    parser.add_argument(
        "--storm-concurrency", type=int, default=0,
        help="after the overload runs, this many closed-loop clients that ignore Retry-After (0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--settle-s", type=float, default=60.0,
        help="before each overload run, wait (at most this long) for the server's CPU to go idle",
    )  # fmt: skip
    parser.add_argument("--pool", type=int, default=None, help="distinct request bodies (default: the load's)")
    parser.add_argument("--max-connections", type=int, default=800, help="client connections at most")
    parser.add_argument("--timeout", type=float, default=60.0, help="client-side timeout per request (s)")
    parser.add_argument(
        "--deadline", type=float, default=None,
        help="the server's deadline (default: --timeout-s of --server-args, $BERTSERVE_TIMEOUT_S, 30)",
    )  # fmt: skip
    parser.add_argument(
        "--preconnect", action=argparse.BooleanOptionalAction, default=True,
        help="open and warm every client connection before the load (--no-preconnect: open them during the burst)",
    )  # fmt: skip
    parser.add_argument("--server-args", default="", help="extra flags for python -m service")
    parser.add_argument("--out", type=Path, default=RESULTS_PREFIX, help="output prefix (.json and .md are added)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.duration > 3600 or args.max_connections > 5000:
        parser.error("bounded on purpose: --duration <= 3600 s and --max-connections <= 5000")
    try:
        loads = selected_loads(args.load)
        models = model_paths(args.model, loads)
    except ValueError as error:
        parser.error(str(error))
    args.deadline = args.deadline or deadline_of(args.server_args)
    args.command = "python -m benchmarks.overload " + shlex.join(sys.argv[1:] if argv is None else argv)
    current: dict[str, Any] = {"loads": {}}
    json_path, md_path = args.out.with_suffix(".json"), args.out.with_suffix(".md")
    for name in loads:  # written after each load: a load that fails later does not lose the ones before
        current["loads"][name] = run_load(args, name, models)
        results = merge(json.loads(json_path.read_text()) if json_path.is_file() else None, current)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=2) + "\n")
        md_path.write_text(markdown(results))
    print(markdown(current))
    return 0 if all_targets_met(current) else 1


if __name__ == "__main__":
    sys.exit(main())
