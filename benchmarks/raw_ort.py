"""The upper bounds: one in-process onnxruntime session fed length-sorted, tightly padded batches.

No HTTP, no queue, no JSON: tokenize every input (as the service would: truncation for classification,
overflowing windows for question answering), sort the rows by length, pad each batch to its longest row
and run. Throughput counts inputs (sentences, questions), not rows, as the HTTP runs do. Padding and the
session come from contract.onnx_io, as in the service and export validation (pad id from the tokenizer).

Two bounds, measured side by side:
- chunk-sorted (``measure``): inputs sorted in chunks of 512 (QA: 128), the best batch (1..64) and thread-pool
  mode (spinning or not) of a sweep on a sample, min(2, cores) intra-op threads;
- global-sorted (``measure_global``): the whole input set tokenized and sorted by length in one pass, the best
  batch of 8/16/32/64 over the whole set, onnxruntime's default threading (intra-op threads: its choice,
  spinning allowed).
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from tokenizers import Encoding, Tokenizer

from contract.onnx_io import PaddedRows, ort_session, pad_rows, token_id

if TYPE_CHECKING:
    import onnxruntime as ort

log = logging.getLogger(__name__)
BATCH_SIZES = (1, 4, 8, 16, 32, 64)
GLOBAL_BATCH_SIZES = (8, 16, 32, 64)
CHUNK_SORTED = "chunk-sorted"
GLOBAL_SORTED = "global-sorted"
ORT_DEFAULT_THREADS = "onnxruntime default"
PIPELINE_QA_MAX_LENGTH = 384
PIPELINE_QA_MAX_STRIDE = 128


@dataclass
class RawResult:
    batch_size: int
    spin: bool
    inputs: int
    rows: int
    seconds: float
    tokenize_seconds: float
    padding_waste: float
    sweep: dict[str, float]
    method: str = CHUNK_SORTED
    threads: str = ""  # intra-op threads the session was given
    cpu_seconds: float = 0.0  # this process's CPU time (all threads) over the measured passes

    @property
    def sequences_per_s(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    @property
    def model_only_sequences_per_s(self) -> float:
        model_seconds = self.seconds - self.tokenize_seconds
        return self.inputs / model_seconds if model_seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["sweep"] = {k: round(v, 2) for k, v in self.sweep.items()}
        data["sequences_per_s"] = round(self.sequences_per_s, 2)
        data["model_only_sequences_per_s"] = round(self.model_only_sequences_per_s, 2)
        data["cpu_ms_per_input"] = round(1000 * self.cpu_seconds / self.inputs, 3) if self.inputs else None
        data["cores_busy"] = round(self.cpu_seconds / self.seconds, 2) if self.seconds else None
        return data


def open_session(model_path: Path, threads: int | None = None, spin: bool = True) -> ort.InferenceSession:
    """onnx_io's session with ``threads`` intra-op threads (default: min(2, cores)), all graph optimisations."""
    return ort_session(model_path, threads=threads or min(2, os.cpu_count() or 1), spin=spin)


class BundleTokenizer(NamedTuple):
    tokenizer: Tokenizer
    max_length: int
    pad_id: int  # the id of the bundle's pad token in its tokenizer


def bundle_tokenizer(bundle: Path, task: str) -> BundleTokenizer:
    spec = json.loads((bundle / "bundle.json").read_text())
    max_length = int(spec["max_length"])
    tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
    pad_id = token_id(tokenizer, (spec.get("special_tokens") or {}).get("pad_token", "[PAD]"))
    tokenizer.no_padding()
    if task == "question-answering":
        # the QA pipeline's (and the service's) default windows
        max_length = min(max_length, PIPELINE_QA_MAX_LENGTH)
        stride = min(max_length // 2, PIPELINE_QA_MAX_STRIDE)
        tokenizer.enable_truncation(max_length, stride=stride, strategy="only_second")
    else:
        tokenizer.enable_truncation(max_length)
    return BundleTokenizer(tokenizer, max_length, pad_id)


def encode_rows(tokenizer: Tokenizer, task: str, inputs: list[Any]) -> list[Encoding]:
    """Every model row for ``inputs``: one per input (a text or a pair), or one per window for long QA contexts."""
    encodings = tokenizer.encode_batch(inputs)
    if task != "question-answering":
        return encodings
    rows: list[Encoding] = []
    for encoding in encodings:
        rows.append(encoding)
        rows.extend(encoding.overflowing)
    return rows


def padded_batches(rows: list[Encoding], batch_size: int, pad_id: int) -> list[PaddedRows]:
    """Rows sorted by length, cut into batches of ``batch_size``, each padded to its longest row."""
    ordered = sorted(rows, key=len)
    return [
        pad_rows([(row.ids, row.type_ids) for row in ordered[start : start + batch_size]], pad_id)
        for start in range(0, len(ordered), batch_size)
    ]


def padding_waste(batches: list[PaddedRows]) -> float:
    total = sum(batch.attention_mask.size for batch in batches)
    real = sum(sum(batch.lengths) for batch in batches)
    return 1.0 - real / total if total else 0.0


def one_pass(
    session: ort.InferenceSession, tokenizer: BundleTokenizer, task: str, inputs: list[Any], batch_size: int
) -> tuple[float, float, int, float]:
    """Tokenize, sort, pad and run every input once: (total s, tokenize s, rows, padding waste)."""
    started = time.perf_counter()
    rows = encode_rows(tokenizer.tokenizer, task, inputs)
    batches = padded_batches(rows, batch_size, tokenizer.pad_id)
    tokenized = time.perf_counter()
    names = [node.name for node in session.get_inputs()]
    for batch in batches:
        session.run(None, {name: batch.feeds[name] for name in names})
    return time.perf_counter() - started, tokenized - started, len(rows), padding_waste(batches)


def measure(
    bundle: Path,
    task: str,
    inputs: list[Any],
    duration_s: float,
    batch_sizes: tuple[int, ...] = BATCH_SIZES,
) -> RawResult:
    """Pick the fastest batch size on a sample, then run length-sorted chunks until ``duration_s`` has passed.

    Each chunk is sorted by length on its own, which is what a server sees at best: it cannot sort
    requests it has not received yet. QA inputs are several windows each, so their chunks are smaller.
    """
    chunk_inputs, sweep_inputs = (128, 48) if task == "question-answering" else (512, 192)
    tokenizer = bundle_tokenizer(bundle, task)
    chunks = [inputs[start : start + chunk_inputs] for start in range(0, len(inputs), chunk_inputs)]
    sample = random.Random(0).sample(inputs, min(sweep_inputs, len(inputs)))
    # the best of both thread-pool modes: spinning wins on an idle machine, sleeping when threads compete
    sessions = {spin: open_session(bundle / "model.onnx", spin=spin) for spin in (True, False)}
    sweep: dict[str, float] = {}
    for spin, candidate in sessions.items():
        one_pass(candidate, tokenizer, task, sample[:8], 8)
        for batch_size in batch_sizes:
            seconds, _, _, _ = one_pass(candidate, tokenizer, task, sample, batch_size)
            sweep[f"{batch_size}{'' if spin else '-nospin'}"] = len(sample) / seconds
    best_key = max(sweep, key=lambda key: sweep[key])
    best, spin = int(best_key.split("-")[0]), not best_key.endswith("-nospin")
    session = sessions[spin]
    log.info("raw ORT %s sweep %s: best batch %d, spinning %s", bundle.name, sweep, best, spin)
    total = tokenize = 0.0
    done = rows = 0
    wastes: list[float] = []
    index = 0
    cpu_started = time.process_time()
    while total < duration_s or done == 0:
        chunk = chunks[index % len(chunks)]
        index += 1
        seconds, tokenize_seconds, chunk_rows, waste = one_pass(session, tokenizer, task, chunk, best)
        total += seconds
        tokenize += tokenize_seconds
        done += len(chunk)
        rows += chunk_rows
        wastes.append(waste)
    cpu_seconds = time.process_time() - cpu_started
    threads = str(min(2, os.cpu_count() or 1))
    return RawResult(best, spin, done, rows, total, tokenize, float(np.mean(wastes)), sweep, CHUNK_SORTED, threads,
                     cpu_seconds)  # fmt: skip


def measure_global(
    bundle: Path, task: str, inputs: list[Any], batch_sizes: tuple[int, ...] = GLOBAL_BATCH_SIZES
) -> RawResult:
    """One pass over the whole input set per batch size (tokenize all, sort all rows by length, pad, run): the best.

    Nothing a server can reach (it never holds the whole set at once), but no chunk boundary, no sample and
    no thread setting of ours: onnxruntime's default threading with spinning allowed. A pass counts its
    tokenization, sorting and padding.
    """
    tokenizer = bundle_tokenizer(bundle, task)
    session = ort_session(bundle / "model.onnx", threads=None, spin=True)
    one_pass(session, tokenizer, task, inputs[:64], 8)
    passes: dict[int, tuple[float, float, int, float, float]] = {}
    for batch_size in batch_sizes:
        cpu_started = time.process_time()
        seconds, tokenize_seconds, rows, waste = one_pass(session, tokenizer, task, inputs, batch_size)
        passes[batch_size] = (seconds, tokenize_seconds, rows, waste, time.process_time() - cpu_started)
    sweep = {str(batch_size): len(inputs) / run[0] for batch_size, run in passes.items()}
    best = min(passes, key=lambda batch_size: passes[batch_size][0])
    log.info("raw ORT global-sorted %s passes %s: best batch %d", bundle.name, sweep, best)
    seconds, tokenize_seconds, rows, waste, cpu_seconds = passes[best]
    return RawResult(best, True, len(inputs), rows, seconds, tokenize_seconds, waste, sweep, GLOBAL_SORTED,
                     ORT_DEFAULT_THREADS, cpu_seconds)  # fmt: skip
