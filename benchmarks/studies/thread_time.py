"""``python -m benchmarks.studies.thread_time``: where each server thread's wall time goes, native frames included.

``benchmarks.overhead --profile`` samples the Python frames of busy threads; what a thread does below Python (the
socket calls, waiting for the GIL, the garbage collector, the event loop's sleep) lands in whichever Python frame
called it. Here py-spy samples every thread of the server, idle or not, with native frames (``--native --idle``,
which pauses the process for each sample: the load runs a little slower than unsampled), while wrk holds ``c``
connections open (one sentence a request); each sample goes to the first category of ``CATEGORIES`` a frame of its
stack matches, innermost frame first, and the report gives each thread's share of its wall time per category,
beside the server's and wrk's CPU per request.

    python -m benchmarks.studies.thread_time --model sst2=benchmarks/scratch/sst2-int8 --concurrency 32,128 \\
        --out benchmarks/results/thread_time-int8
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import loadgen, profile, servers
from benchmarks.datasets import REPO_ROOT, SCRATCH_DIR
from benchmarks.loads import bertserve_loads, bertserve_path
from benchmarks.report import load_average, shown_path, write_report

log = logging.getLogger("benchmarks.studies.thread_time")
LOG_DIR = SCRATCH_DIR / "thread-time-logs"


def _compiled(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((category, re.compile(pattern)) for category, pattern in pairs)


# (category, pattern on one native frame, a C function): the innermost native frame that matches takes the sample.
NATIVE_CATEGORIES = _compiled((
    ("waiting for events (epoll)", r"^epoll_p?wait"),
    ("socket write", r"^(write|writev|send|sendmsg|sendto) "),
    ("socket read", r"^(read|recv|recvfrom|recvmsg|readv) "),
    ("garbage collector", r"^(gc_collect_main|gc_collect_with_callback|collect_generations|gc_collect) "),
    ("getpid (asyncio's running-loop check)", r"^getpid "),
    ("waiting for the GIL", r"^(take_gil|PyEval_RestoreThread|PyEval_AcquireThread|drop_gil) "),
))  # fmt: skip
WAITING_FOR_WORK = re.compile(r"Lanes\.next_batch|Condition\.wait|Worker\._serve")
# else (category, pattern on any frame): the first that matches a frame, innermost first, takes it.
FRAME_CATEGORIES = _compiled((
    ("ORT run", r"onnxruntime_inference_collection\.py"),
    ("waiting for a batch", WAITING_FOR_WORK.pattern),
    ("tokenizer (native)", r"tokenizers"),
    ("Python, and native code it calls", r"\.py:"),
))  # fmt: skip
# A thread blocked in a condition variable under Python frames (no ``take_gil`` frame resolved) waits for the GIL
# when its innermost Python frame is not one that waits for work.
CONDITION_WAIT = re.compile(r"^pthread_cond_(timed)?wait")


def category_of(frames: list[str]) -> str:
    """The category of one sample (frames outermost first, as py-spy writes them)."""
    innermost = list(reversed(frames))
    for frame in innermost:
        if ".py:" in frame:  # a Python frame: the native categories name C functions only
            continue
        for category, pattern in NATIVE_CATEGORIES:
            if pattern.search(frame):
                return category
        if CONDITION_WAIT.search(frame):
            python = next((f for f in innermost if ".py:" in f), "")
            return "waiting for a batch" if WAITING_FOR_WORK.search(python) else "waiting for the GIL"
    for frame in innermost:
        for category, pattern in FRAME_CATEGORIES:
            if pattern.search(frame):
                return category
    return "native, unresolved"


def thread_name(frame: str) -> str:
    """py-spy's ``thread (tid): name`` without the id; the workers' numbered names kept apart."""
    return frame.split(": ", 1)[-1] if ": " in frame else frame


def thread_shares(collapsed: str) -> dict[str, dict[str, float]]:
    """Per thread, each category's share of its samples (py-spy ``--idle``: a sample per thread per tick)."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        counts[thread_name(frames[0])][category_of(frames[1:])] += int(count)
    return {
        thread: {category: round(n / sum(counter.values()), 4) for category, n in counter.most_common()}
        for thread, counter in sorted(counts.items())
    }


def py_spy() -> str:
    found = profile.py_spy_path()
    if found is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    return found


def measure(bundle: Path, load: str, concurrency: list[int], duration_s: float, rate: int) -> list[dict[str, Any]]:
    bodies = loadgen.write_bodies(bertserve_loads(load, "m")[0].bodies, LOG_DIR / f"bodies-{load}.jsonl")
    port = servers.free_port()
    command = [sys.executable, "-m", "service", "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning",
               "--model", f"m={bundle}"]  # fmt: skip
    points = []
    with servers.running("thread-time", command, port, "/health/ready", LOG_DIR) as server:
        url = server.base_url + bertserve_path(load)
        for clients in concurrency:
            loadgen.run_wrk(url, bodies, clients, 3.0)
            out = LOG_DIR / f"native-{load}-c{clients}.txt"
            spy = subprocess.Popen(
                [py_spy(), "record", "--pid", str(server.pid), "--duration", str(round(duration_s)), "--format",
                 "raw", "--output", str(out), "--rate", str(rate), "--threads", "--native", "--idle"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )  # fmt: skip
            time.sleep(0.5)  # py-spy attached before the load starts
            cpu_before = server.cpu_seconds()
            result = loadgen.run_wrk(url, bodies, clients, duration_s)
            cpu = server.cpu_seconds() - cpu_before
            _, stderr = spy.communicate(timeout=120)
            if spy.returncode != 0 or not out.exists():
                raise RuntimeError(f"py-spy failed: {stderr.decode(errors='replace')[-500:]}")
            requests = max(1, result.requests)
            points.append({
                "concurrency": clients, "sequences_per_s": round(result.sequences_per_s, 2),
                "server_cpu_ms_per_request": round(1000 * cpu / requests, 3),
                "client_cpu_ms_per_request": round(1000 * result.client_cpu_s / requests, 3),
                "threads": thread_shares(out.read_text()),
            })  # fmt: skip
            log.info("c=%d: %.1f seq/s", clients, result.sequences_per_s)
    return points


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Where each server thread's time goes, native frames included (benchmarks.studies.thread_time)",
        "",
        f"Command: `{report['command']}`; tree {report['tree']}; bundle {report['bundle']}, route "
        f"`{report['route']}`, one sentence a request, wrk; {report['duration_s']:g} s of py-spy `--native --idle` "
        f"at {report['rate']} Hz per point (each sample pauses the server: the throughput beside the table is the "
        "sampled server's). Load average "
        f"at start {report['load_avg']['start']}, at end {report['load_avg']['end']}.",
        "",
    ]
    for point in report["points"]:
        lines += [
            f"## c={point['concurrency']}: {point['sequences_per_s']:.1f} seq/s, server CPU "
            f"{point['server_cpu_ms_per_request']:.2f} ms/request, wrk {point['client_cpu_ms_per_request']:.2f}",
            "",
        ]
        threads = [name for name in point["threads"] if name.startswith("bertserve-worker") or name == "MainThread"]
        categories = sorted({c for name in threads for c in point["threads"][name]},
                            key=lambda c: -max(point["threads"][name].get(c, 0) for name in threads))  # fmt: skip
        lines.append("| share of the thread's wall time | " + " | ".join(threads) + " |")
        lines.append("| --- | " + " | ".join("---:" for _ in threads) + " |")
        for category in categories:
            cells = [f"{100 * point['threads'][name].get(category, 0):.1f} %" for name in threads]
            lines.append(f"| {category} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.thread_time", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", required=True, help="LOAD=BUNDLE: sst2 or embeddings (as benchmarks.overhead)")
    parser.add_argument("--concurrency", type=lambda t: [int(c) for c in t.split(",")], default=[32, 128])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument(
        "--rate", type=int, default=25, help="samples a second: each pauses the server (100 cost int8 a third)"
    )
    parser.add_argument("--out", type=Path, required=True, help="output prefix (.json and .md are added)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load, _, path = args.model.partition("=")
    bundle = Path(path).resolve()
    at_start = os.getloadavg()
    points = measure(bundle, load, args.concurrency, args.duration, args.rate)
    from benchmarks.ab import revision

    command = "python -m benchmarks.studies.thread_time " + " ".join(sys.argv[1:] if argv is None else argv)
    report = {"command": command, "tree": revision(REPO_ROOT), "bundle": shown_path(bundle),
              "route": bertserve_path(load), "duration_s": args.duration, "rate": args.rate, "points": points,
              "load_avg": load_average(at_start)}  # fmt: skip
    write_report(args.out, report, markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
