"""``python -m benchmarks.studies.prepare_seed``: how far is the prepare stage's start-up rate from what a task's long
requests then cost, and does ``CALIBRATION_MARGIN`` cover it?

Until the prepare stage (``service/prepare_stage.py``) has timed work of its own it admits long requests on a rate
seeded at start-up: one timed tokenization of ~10 KB of the vocabulary's words, doubled (``SEED_MARGIN``); beside
other waiting work that rate counts ``CALIBRATION_MARGIN`` times more. Here, per load, the model's engine runs in this
process as ``python -m service`` builds it and one client sends the load's bodies one after another; every request the
stage timed (its tokenizing and decoding on the prepare threads) gives seconds per character, set against the seed's
own (undoubled) rate. Loads: ordinary multi-input requests (16 SST-2 sentences, 32 sentences to embed, a SQuAD
question on its paragraph) and ``benchmarks.overload``'s long ones (20-70 KB QA contexts, 5 KB NER texts, 32
documents of ~512 tokens to embed).

    python -m benchmarks.studies.prepare_seed --model embeddings=benchmarks/scratch/minilm-embeddings \\
        --out benchmarks/results/prepare_seed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks import datasets
from benchmarks.overload_loads import LOADS, bundle_tokenizer, default_bundle, request_bodies, short_texts
from benchmarks.report import load_average, shown_path, tree_commit, write_report
from benchmarks.studies.core_floor import closed_loop, route_of
from service.engine import Engine
from service.prepare_stage import CALIBRATION_MARGIN, SEED_MARGIN
from service.settings import Settings

log = logging.getLogger("benchmarks.studies.prepare_seed")
INLINE_CHARS = Settings().prepare_inline_chars  # shorter requests are tokenized on the event loop, never timed
# load -> (role, route, what a request is)
PLAN: dict[str, tuple[str, str, str]] = {
    "sst2-x16": ("sst2", "/v1/text-classification", "16 SST-2 dev sentences"),
    "embeddings-x32": ("embeddings", "/v1/embeddings", "32 SST-2 dev sentences"),
    "squad": ("qa", "/v1/question-answering", "a SQuAD dev question on its own paragraph (over 1,024 characters)"),
    "qa-long": ("qa", "/v1/question-answering", LOADS["qa-long"].what),
    "ner-long": ("ner", "/v1/token-classification", LOADS["ner-long"].what),
    "embeddings-long": ("embeddings", "/v1/embeddings", LOADS["embeddings-long"].what),
}


def bodies_of(load: str, bundle: Path) -> list[dict[str, Any]]:
    if load == "sst2-x16":
        texts = short_texts(1600)
        return [{"inputs": texts[start : start + 16], "truncation": True} for start in range(0, len(texts), 16)]
    if load == "embeddings-x32":
        texts = short_texts(1600)
        return [{"input": texts[start : start + 32]} for start in range(0, len(texts), 32)]
    if load == "squad":
        data = json.loads(datasets.squad_path().read_text(encoding="utf-8"))["data"]
        pairs = [(qa["question"], paragraph["context"]) for article in data for paragraph in article["paragraphs"]
                 for qa in paragraph["qas"][:1]]  # fmt: skip
        long = [(question, context) for question, context in pairs if len(question) + len(context) > INLINE_CHARS]
        return [{"inputs": {"question": question, "context": context}} for question, context in long[:400]]
    return [{k: v for k, v in body.items() if k != "model"} for body in
            request_bodies(LOADS[load], "m", bundle_tokenizer(bundle), pool=40)]  # fmt: skip


async def measure(load: str, bundle: Path, seconds: float) -> dict[str, Any]:
    """The seed's rate and the per-character cost of every request the stage timed, one client, ``seconds``."""
    engine = Engine.from_bundle(bundle, Settings(tune=False, intra_op_threads=1, model_workers=1), name="m")
    await engine.start()
    ledger = engine._ledger
    seed = (ledger.seconds_per_char or 0.0) / SEED_MARGIN
    timed: list[float] = []
    keep = ledger.done

    def done(chars: int, spent: float | None) -> None:
        if spent is not None and chars:
            timed.append(spent / chars)
        keep(chars, spent)

    ledger.done = done  # type: ignore[method-assign]
    try:
        bodies = [json.dumps(body).encode() for body in bodies_of(load, bundle)]
        await closed_loop(engine, route_of(PLAN[load][1]), bodies, 1, seconds)
    finally:
        await engine.stop()
    if not timed or not seed:
        raise RuntimeError(f"{load}: nothing timed on the prepare stage (seed {seed})")
    ratios = sorted(value / seed for value in timed)
    return {
        "load": load, "request": PLAN[load][2], "bundle": shown_path(bundle), "requests_timed": len(timed),
        "seed_us_per_char": round(seed * 1e6, 4),
        "median_us_per_char": round(statistics.median(timed) * 1e6, 4),
        "first_x_seed": round(timed[0] / seed, 2),
        "median_x_seed": round(statistics.median(ratios), 2),
        "p90_x_seed": round(ratios[int(0.9 * (len(ratios) - 1))], 2),
        "max_after_first_x_seed": round(max(timed[1:] or timed) / seed, 2),
    }  # fmt: skip


def markdown(report: dict[str, Any]) -> str:
    cover = SEED_MARGIN * CALIBRATION_MARGIN
    lines = [
        "# The prepare stage's start-up rate against what requests then cost (benchmarks.studies.prepare_seed)",
        "",
        f"Tree {report['tree']}; one client per load, {report['seconds']:g} s, in process; every request timed on "
        f"the prepare threads (tokenizing and decoding) against the seed's own rate (its tokenization of ~10 KB of "
        f"vocabulary words). Until the stage has timed its own work, the seed counts SEED_MARGIN x "
        f"CALIBRATION_MARGIN = {cover:g}x beside other waiting work. {report['cpu_count']} CPUs; load average at "
        f"start {report['load_avg']['start']}, at end {report['load_avg']['end']}.",
        "",
        "| load | a request | bundle | timed | seed us/char | median us/char | first | median | p90 | max after the "
        f"first | p90 within {cover:g}x |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in report["rows"]:
        lines.append(
            f"| {row['load']} | {row['request']} | `{row['bundle']}` | {row['requests_timed']} "
            f"| {row['seed_us_per_char']:.3f} | {row['median_us_per_char']:.3f} | {row['first_x_seed']:.2f}x "
            f"| {row['median_x_seed']:.2f}x | {row['p90_x_seed']:.2f}x | {row['max_after_first_x_seed']:.2f}x "
            f"| {'yes' if row['p90_x_seed'] <= cover else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.studies.prepare_seed", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", action="append", default=[], metavar="ROLE=BUNDLE",
                        help="a role's bundle (sst2, qa, ner, embeddings); default: benchmarks.overload's")  # fmt: skip
    parser.add_argument("--loads", default=",".join(PLAN), help=f"comma-separated, of {', '.join(PLAN)}")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of requests per load")
    parser.add_argument("--out", type=Path, help="report prefix (.json and .md)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    given = {role: Path(path) for role, _, path in (pair.partition("=") for pair in args.model)}
    started = os.getloadavg()
    rows = []
    for load in args.loads.split(","):
        role = PLAN[load][0]
        bundle = given.get(role) or default_bundle(role)
        rows.append(asyncio.run(measure(load, bundle, args.seconds)))
        log.info("%s", rows[-1])
    report = {"tree": tree_commit(), "seconds": args.seconds, "cpu_count": os.cpu_count(), "rows": rows,
              "seed_margin": SEED_MARGIN, "calibration_margin": CALIBRATION_MARGIN,
              "load_avg": load_average(started)}  # fmt: skip
    text = markdown(report)
    if args.out is not None:
        write_report(args.out, report, text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
