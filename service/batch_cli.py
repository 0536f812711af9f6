"""``python -m service batch INPUT --out OUTPUT --models DIR ...``: a batch input file through the same core, no HTTP.

INPUT is an OpenAI batch file (``{"custom_id", "method": "POST", "url", "body"}`` a line; each line's url any batch
endpoint: /v1/embeddings or a /v1 task route). Entries are written in the Batch API's format: 200s to OUTPUT, the
rest to ``--errors`` (default: OUTPUT's name with ``.errors.jsonl``). Each chunk is appended and synced; run the same
command again after a crash or Ctrl-C and it resumes: lines whose entry is in either file are skipped (a partial last
line is cut off first). Every serving flag applies (``python -m service --help``); progress goes to stderr.

``--shard INDEX/COUNT`` answers only every COUNT-th line from line INDEX (``--shard COUNT``: the index from
``$JOB_COMPLETION_INDEX``, as a Kubernetes Indexed Job's pods have it; ``{index}`` in OUTPUT becomes the index).
``python -m service batch-join INPUT PARTS... --out OUTPUT`` joins the shards' files (or folders of them) into one
output and one errors file in input order, each line once; it exits 1 naming the lines no shard answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from contract.bundle import BundleError
from service.batch.shards import INDEX_VARIABLE, Shard, errors_path, join, parse_shard
from service.flags import build_parser
from service.settings import Settings

if TYPE_CHECKING:
    from service.core import ServiceCore

logger = logging.getLogger("service.batch_cli")
CLI_BATCH_ID = "cli"  # entry ids come from this and the line's number, so a resumed run writes the same ids


def build_batch_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    parser.prog = "python -m service batch"
    parser.description = "Run an OpenAI batch input file through the models, without HTTP."
    parser.add_argument("input", type=Path, metavar="INPUT", help="The batch file (JSONL), one request a line.")
    parser.add_argument("--out", type=Path, required=True, metavar="OUTPUT", help="Where the 200 answers go.")
    parser.add_argument("--errors", type=Path, default=None, metavar="ERRORS", help="Where the other entries go.")
    parser.add_argument(
        "--shard", type=_shard, default=None, metavar="INDEX/COUNT",
        help=f"Answer only lines whose number is INDEX modulo COUNT; COUNT alone takes INDEX from ${INDEX_VARIABLE}. "
        "{index} in OUTPUT becomes INDEX.",
    )  # fmt: skip
    return parser


def _shard(text: str) -> Shard:
    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_join_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m service batch-join",
        description="Join the outputs of `python -m service batch --shard` runs into one output and one errors file.",
    )
    parser.add_argument("input", type=Path, metavar="INPUT", help="The batch file the shards ran.")
    parser.add_argument("parts", type=Path, nargs="+", metavar="PART", help="Shard output or errors files, or folders.")
    parser.add_argument("--out", type=Path, required=True, metavar="OUTPUT", help="Where the 200 answers go.")
    parser.add_argument("--errors", type=Path, default=None, metavar="ERRORS", help="Where the other entries go.")
    return parser


def join_main(argv: list[str]) -> int:
    args = build_join_parser().parse_args(argv)
    errors = args.errors or errors_path(args.out)
    if not args.input.is_file():
        print(f"bertserve batch-join: error: no input file {args.input}", file=sys.stderr)
        return 2
    joined = join(args.input, args.parts, args.out, errors, CLI_BATCH_ID)
    print(
        f"{joined.lines} lines: {joined.completed} answered ({args.out}), {joined.failed} failed ({errors}), "
        f"{joined.duplicates} duplicate entries dropped, {joined.foreign} entries of other inputs ignored",
        file=sys.stderr,
    )
    if joined.missing:
        shown = ", ".join(str(number) for number in joined.missing[:10])
        print(f"bertserve batch-join: error: {len(joined.missing)} lines have no entry in any part "
              f"(line numbers {shown}{', ...' if len(joined.missing) > 10 else ''}): run their shards again",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


def batch_main(argv: list[str]) -> int:
    args = vars(build_batch_parser().parse_args(argv))
    source, output, shard = args.pop("input"), args.pop("out"), args.pop("shard")
    if shard is not None:
        output = Path(str(output).replace("{index}", str(shard.index)))
    errors = args.pop("errors") or errors_path(output)
    try:
        settings = Settings(**{key: value for key, value in args.items() if value is not None})
    except ValidationError as exc:
        print(f"bertserve batch: error: bad settings: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not source.is_file():
        print(f"bertserve batch: error: no input file {source}", file=sys.stderr)
        return 2
    from service.core import ServiceCore
    from service.device import DeviceUnavailable

    core = ServiceCore(settings)
    try:
        core.load()
    except (DeviceUnavailable, BundleError, FileNotFoundError) as exc:
        print(f"bertserve batch: error: {exc}", file=sys.stderr)
        return 1
    if not core.registry.engines:
        print("bertserve batch: error: no models to serve (use --models DIR or --model NAME=PATH)", file=sys.stderr)
        return 2
    output.parent.mkdir(parents=True, exist_ok=True)
    errors.parent.mkdir(parents=True, exist_ok=True)
    completed, failed = asyncio.run(run_file(core, source, output, errors, shard))
    print(f"\n{completed} answered ({output}), {failed} failed ({errors})", file=sys.stderr)
    return 0


def done_entries(path: Path) -> set[str]:
    """The entry ids a file holds; a partial last line (a run killed mid-write) is cut off."""
    if not path.exists():
        return set()
    content = path.read_bytes()
    whole = content[: content.rfind(b"\n") + 1]
    if len(whole) != len(content):
        with path.open("r+b") as target:
            target.truncate(len(whole))
    return {json.loads(line)["id"] for line in whole.splitlines() if line.strip()}


async def run_file(
    core: ServiceCore, source: Path, output: Path, errors: Path, shard: Shard | None = None
) -> tuple[int, int]:
    """Answer every line of ``source`` (of ``shard``) not answered yet; the counts of 200s and of the rest, this
    run's and before."""
    from service.api.batch_lines import BATCH_ROUTES, RouteCall
    from service.batch.lines import entry_id, plan_lines, read_spans
    from service.batch.runner import line_entry

    await core.start()
    try:
        while not core.ready:
            await asyncio.sleep(0.05)
        plan = await asyncio.to_thread(plan_lines, source)
        done = done_entries(output) | done_entries(errors)
        mine = [number for number in range(len(plan)) if shard is None or shard.owns(number)]
        todo = [number for number in mine if entry_id(CLI_BATCH_ID, number) not in done]
        call, chunk_lines = RouteCall(core), core.settings.batch_chunk_lines
        completed, failed = len(done_entries(output)), len(done_entries(errors))
        with output.open("ab") as answers, errors.open("ab") as failures:
            for start in range(0, len(todo), chunk_lines):
                numbers = todo[start : start + chunk_lines]
                raws = await asyncio.to_thread(read_spans, source, [plan.spans[number] for number in numbers])
                entries = await asyncio.gather(
                    *(
                        line_entry(call, CLI_BATCH_ID, BATCH_ROUTES.keys(), number, raw, plan)
                        for number, raw in zip(numbers, raws, strict=True)
                    )
                )
                for target, ok in ((answers, True), (failures, False)):
                    target.write(b"".join(entry for good, entry in entries if good == ok))
                    target.flush()
                    os.fsync(target.fileno())
                completed += sum(1 for good, _ in entries if good)
                failed += sum(1 for good, _ in entries if not good)
                sys.stderr.write(f"\r{completed + failed}/{len(mine)} lines ({failed} failed)")
        return completed, failed
    finally:
        await core.stop()
