"""Sharded batch runs: ``--shard INDEX/COUNT`` takes every COUNT-th line, ``batch-join`` puts the shards' entries
back together in input order, each line once (what docker/k8s/batch's Indexed Job and its join step run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service.batch.lines import answered, unanswered
from service.batch.shards import Shard, join, parse_shard
from service.batch_cli import CLI_BATCH_ID
from tests.service.tiny_models import TinyModel

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
URL = "/v1/text-classification"


def write_input(path: Path, count: int) -> list[str]:
    ids = [f"c{n}" for n in range(count)]
    lines = [{"custom_id": cid, "method": "POST", "url": URL, "body": {"inputs": f"review {cid}"}} for cid in ids]
    path.write_text("".join(json.dumps(line) + "\n" + ("\n" if n == 3 else "") for n, line in enumerate(lines)))
    return ids


def test_a_shard_is_index_over_count_or_the_count_with_the_jobs_completion_index() -> None:
    assert parse_shard("1/3") == Shard(1, 3)
    assert parse_shard("4", {"JOB_COMPLETION_INDEX": "2"}) == Shard(2, 4)
    assert [n for n in range(10) if Shard(1, 3).owns(n)] == [1, 4, 7]
    for text, env, says in (
        ("3", {}, "JOB_COMPLETION_INDEX is not set"),
        ("3/3", {}, "the index must be 0 to 2"),
        ("0/0", {}, "the index must be 0 to -1"),
        ("a/2", {}, "whole numbers"),
    ):
        with pytest.raises(ValueError, match=says):
            parse_shard(text, env)


def test_join_writes_each_line_once_in_input_order_and_names_the_missing_ones(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    ids = write_input(source, 7)
    parts = tmp_path / "parts"
    parts.mkdir()

    def entry(number: int) -> bytes:
        if number == 5:
            return unanswered(CLI_BATCH_ID, number, ids[number], "invalid_request", "no")
        return answered(CLI_BATCH_ID, number, ids[number], 200, {"n": number})

    (parts / "part-0.jsonl").write_bytes(b"".join(entry(n) for n in (4, 0, 2)) + entry(6)[:20])
    (parts / "part-1.jsonl").write_bytes(b"".join(entry(n) for n in (1, 3)))
    (parts / "part-1.errors.jsonl").write_bytes(entry(5) + answered("other", 0, "x", 200, {}))
    extra = tmp_path / "again.jsonl"
    extra.write_bytes(entry(1))
    output, errors = tmp_path / "out.jsonl", tmp_path / "out.errors.jsonl"

    joined = join(source, [parts, extra], output, errors, CLI_BATCH_ID)

    assert [json.loads(line)["custom_id"] for line in output.read_text().splitlines()] == ids[:5]
    assert [json.loads(line)["response"]["body"]["n"] for line in output.read_text().splitlines()] == [0, 1, 2, 3, 4]
    assert [json.loads(line)["custom_id"] for line in errors.read_text().splitlines()] == ["c5"]
    assert (joined.lines, joined.completed, joined.failed, joined.duplicates, joined.foreign) == (7, 5, 1, 1, 1)
    assert joined.missing == [6]


def test_two_shards_and_their_join_answer_every_line_once_as_one_run_does(
    tiny_models: dict[str, TinyModel], tmp_path: Path
) -> None:
    bundle = tiny_models["text-classification"].bundle
    source = tmp_path / "in.jsonl"
    ids = write_input(source, 21)
    serve = ["--model", f"sentiment={bundle}", "--no-tune", "--intra-op-threads", "1", "--batch-chunk-lines", "4",
             "--log-level", "warning"]  # fmt: skip

    def service(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
        command = [sys.executable, "-m", "service", *args]
        return subprocess.run(command, cwd=REPO, capture_output=True, timeout=120, check=False, env=env)

    whole = service("batch", str(source), "--out", str(tmp_path / "whole.jsonl"), *serve)
    assert whole.returncode == 0, whole.stderr.decode()
    for index in (0, 1):
        env = {**os.environ, "JOB_COMPLETION_INDEX": str(index)}
        shard = service("batch", str(source), "--out", str(tmp_path / "parts" / "part-{index}.jsonl"), "--shard", "2",
                        *serve, env=env)  # fmt: skip
        assert shard.returncode == 0, shard.stderr.decode()
    part_ids = [
        [
            json.loads(line)["custom_id"]
            for line in (tmp_path / "parts" / f"part-{index}.jsonl").read_text().splitlines()
        ]
        for index in (0, 1)
    ]
    assert sorted(part_ids[0]) == sorted(ids[0::2]) and sorted(part_ids[1]) == sorted(ids[1::2])

    output = tmp_path / "joined.jsonl"
    done = service("batch-join", str(source), str(tmp_path / "parts"), "--out", str(output))
    assert done.returncode == 0, done.stderr.decode()
    whole_entries = sorted((tmp_path / "whole.jsonl").read_text().splitlines())
    assert sorted(output.read_text().splitlines()) == whole_entries
    assert [json.loads(line)["custom_id"] for line in output.read_text().splitlines()] == ids
    assert (tmp_path / "joined.errors.jsonl").read_text() == ""

    (tmp_path / "parts" / "part-1.jsonl").unlink()
    incomplete = service("batch-join", str(source), str(tmp_path / "parts"), "--out", str(output))
    assert incomplete.returncode == 1
    assert "10 lines have no entry in any part" in incomplete.stderr.decode()
