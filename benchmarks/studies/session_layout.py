"""Raw ORT with the cores split several ways: sessions, intra-op threads per session, and callers.

``python -m benchmarks.studies.session_layout BUNDLE [--task sst2] [--batch 8,16]`` tokenizes the task's evaluation
inputs once, sorts them by length, and runs every batch through each layout: N callers (threads; onnxruntime
releases the GIL while it runs) take alternate batches, each on its session, which may be one session shared by
all (as the service's workers share one). Logs sequences/s per layout and batch size, then the median batch-1
latency of a one-thread and an all-core session: what a lone request waits for in each layout.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import threading
import time
from pathlib import Path

import onnxruntime as ort

from benchmarks.loads import ROUTES, load_inputs
from benchmarks.raw_ort import bundle_tokenizer, encode_rows, padded_batches
from contract.onnx_io import PaddedRows, ort_session

log = logging.getLogger("session_layout")


def run_all(session: ort.InferenceSession, batches: list[PaddedRows]) -> None:
    names = [node.name for node in session.get_inputs()]
    for batch in batches:
        session.run(None, {name: batch.feeds[name] for name in names})


def sequences_per_s(sessions: list[ort.InferenceSession], batches: list[PaddedRows], rows: int) -> float:
    """Every batch once, batch k on session k mod len(sessions), the sessions on threads of their own."""
    shares = [batches[k :: len(sessions)] for k in range(len(sessions))]
    for session, share in zip(sessions, shares, strict=True):
        run_all(session, share[:3])  # warm-up: first shapes allocate
    threads = [threading.Thread(target=run_all, args=pair) for pair in zip(sessions, shares, strict=True)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return rows / (time.perf_counter() - started)


def batch1_ms(session: ort.InferenceSession, batches: list[PaddedRows], runs: int = 30) -> float:
    names = [node.name for node in session.get_inputs()]
    feeds = [{name: batch.feeds[name] for name in names} for batch in batches[:: max(1, len(batches) // runs)]]
    for feed in feeds[:3]:
        session.run(None, feed)
    times = []
    for feed in feeds:
        started = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.session_layout", description=__doc__)
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--task", default="sst2", choices=["conll", "squad", "sst2"])
    parser.add_argument("--batch", default="8,16", help="batch sizes, comma-separated")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    task = ROUTES[args.task]
    tokenizer = bundle_tokenizer(args.bundle, task)
    rows = encode_rows(tokenizer.tokenizer, task, load_inputs(args.task))
    model = args.bundle / "model.onnx"
    wide = ort_session(model, threads=args.cores, spin=False)
    narrow = ort_session(model, threads=1, spin=False)
    layouts = {
        f"1 session x {args.cores} threads, 1 caller": [wide],
        f"{args.cores} sessions x 1 thread": [ort_session(model, threads=1, spin=False) for _ in range(args.cores)],
        f"1 session x 1 thread, {args.cores} callers": [narrow] * args.cores,
        f"1 session x {args.cores} threads, {args.cores} callers": [wide] * args.cores,
    }
    for size in (int(value) for value in args.batch.split(",")):
        batches = padded_batches(rows, size, tokenizer.pad_id)
        for name, sessions in layouts.items():
            log.info("%s, batch %d: %.1f seq/s", name, size, sequences_per_s(sessions, batches, len(rows)))
    singles = padded_batches(rows, 1, tokenizer.pad_id)
    for name, session in ((f"{args.cores} threads", wide), ("1 thread", narrow)):
        log.info("batch 1, one session x %s: median %.2f ms", name, batch1_ms(session, singles))


if __name__ == "__main__":
    main()
