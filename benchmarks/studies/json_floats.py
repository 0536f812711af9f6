"""``python -m benchmarks.studies.json_floats``: what writing an embeddings answer costs, json.dumps of the vectors'
lists (the service before) against ``service.api.bodies.encode_json`` (float arrays by orjson), and that both
write the same bytes. And what a Batch API output entry for that answer costs, given the answer's bytes: read back
and written again by ``json`` (the service before) against put in as written (``service.batch.lines.EncodedJson``).

Unit-length float32 vectors (as a normalising embedding model gives; about half of 384-float ones hold a value under
1e-4, which takes the exponent fix-up), in OpenAI's embeddings answer, 1 and 16 vectors an answer, 384 and 1,024
floats a vector; microseconds per answer, median of 5 passes over 200 answers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from service.api.bodies import encode_json
from service.batch.lines import EncodedJson, answered


def as_lists(payload: Any) -> bytes:
    """The service's answer before: every array as ``tolist()``, then json.dumps."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=lambda value: value.tolist()).encode()


def answers(count: int, vectors: int, size: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    pool = rng.standard_normal((64, size))
    pool = (pool / np.linalg.norm(pool, axis=1, keepdims=True)).astype(np.float32)
    return [
        {
            "object": "list",
            "data": [
                {"object": "embedding", "index": k, "embedding": pool[(i + k) % len(pool)]} for k in range(vectors)
            ],
            "model": "minilm",
            "usage": {"prompt_tokens": 9 * vectors, "total_tokens": 9 * vectors},
        }
        for i in range(count)
    ]


def entry_again(content: bytes) -> bytes:
    return answered("batch_x", 7, "line-7", 200, json.loads(content))


def entry_as_is(content: bytes) -> bytes:
    return answered("batch_x", 7, "line-7", 200, EncodedJson(content))


def microseconds(write: Callable[[Any], bytes], payloads: list[Any], passes: int = 5) -> float:
    times = []
    for _ in range(passes):
        started = time.perf_counter()
        for payload in payloads:
            write(payload)
        times.append((time.perf_counter() - started) / len(payloads))
    return 1e6 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.json_floats", description=__doc__)
    parser.add_argument("--out", type=Path, help="write the table here too (markdown)")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()
    rows = ["| floats a vector | vectors an answer | json.dumps of lists, us | encode_json, us | same bytes |",
            "| ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for size in (384, 1024):
        for vectors in (1, 16):
            payloads = answers(200, vectors, size)
            same = all(as_lists(payload) == encode_json(payload) for payload in payloads)
            before, after = microseconds(as_lists, payloads), microseconds(encode_json, payloads)
            rows.append(f"| {size} | {vectors} | {before:.0f} | {after:.0f} | {'yes' if same else 'NO'} |")
    rows += ["", "A batch output entry of that answer, from its bytes:", "",
             "| floats a vector | vectors an answer | json.loads + json.dumps, us | EncodedJson, us | same bytes |",
             "| ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for size in (384, 1024):
        for vectors in (1, 16):
            written = [encode_json(payload) for payload in answers(200, vectors, size)]
            same = all(entry_again(content) == entry_as_is(content) for content in written)
            before, after = microseconds(entry_again, written), microseconds(entry_as_is, written)
            rows.append(f"| {size} | {vectors} | {before:.0f} | {after:.0f} | {'yes' if same else 'NO'} |")
    load_end = [round(x, 2) for x in os.getloadavg()]
    load = f"Load average at start {[round(x, 2) for x in load_start]}, at end {load_end}."
    text = "\n".join(["# Writing an embeddings answer (benchmarks.studies.json_floats)", "", load, "", *rows, ""])
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
