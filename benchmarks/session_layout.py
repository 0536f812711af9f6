"""Raw ORT with the cores split two ways: one session with N intra-op threads, or N one-thread sessions side by side.

``python -m benchmarks.session_layout BUNDLE [--task sst2] [--batch 8,16]`` tokenizes the task's evaluation
inputs once, sorts them by length, and runs every batch through each layout (the N sessions take alternate batches,
each on its own thread; onnxruntime releases the GIL while it runs). Logs sequences/s per layout and batch size.
Why the service runs ``model_workers`` one-thread sessions by default on 2 cores: README, Performance.
"""

from __future__ import annotations

import argparse
import logging
import os
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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.session_layout", description=__doc__)
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
    layouts = {
        f"1 session x {args.cores} threads": [ort_session(model, threads=args.cores, spin=False)],
        f"{args.cores} sessions x 1 thread": [ort_session(model, threads=1, spin=False) for _ in range(args.cores)],
    }
    for size in (int(value) for value in args.batch.split(",")):
        batches = padded_batches(rows, size, tokenizer.pad_id)
        for name, sessions in layouts.items():
            log.info("%s, batch %d: %.1f seq/s", name, size, sequences_per_s(sessions, batches, len(rows)))


if __name__ == "__main__":
    main()
