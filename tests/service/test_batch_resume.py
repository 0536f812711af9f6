"""A batch survives SIGKILL: a real ``python -m service`` process is killed in the middle of a batch and started
again on the same ``--data-dir``; the batch resumes after its last committed chunk and its output holds every
custom_id exactly once, each answer equal to the online route's."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai
import pytest

from tests.service.apptools import free_port, wait_until_ready
from tests.service.tiny_models import TinyModel

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
LINES = 2000


@contextmanager
def service_process(
    bundle: Path, data_dir: Path, port: int, name: str = "sentiment"
) -> Iterator[subprocess.Popen[bytes]]:
    command = [
        sys.executable, "-m", "service", "--model", f"{name}={bundle}", "--data-dir", str(data_dir),
        "--port", str(port), "--intra-op-threads", "1", "--model-workers", "1", "--no-tune",
        "--batch-chunk-lines", "8", "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    env = {**os.environ, "ORT_DISABLE_TELEMETRY": "1"}
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def alive() -> None:
        assert process.poll() is None, process.stderr.read().decode() if process.stderr else "exited"

    try:
        wait_until_ready(f"http://127.0.0.1:{port}", 60, alive)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(30)


def test_a_batch_killed_mid_way_resumes_and_answers_every_line_once(
    tiny_models: dict[str, TinyModel], tmp_path: Path
) -> None:
    bundle, data_dir, port = tiny_models["text-classification"].bundle, tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    bodies = {
        f"line-{n}": {"inputs": f"sentence {n} was {'good' if n % 3 else 'not good at all'}"} for n in range(LINES)
    }
    content = b"".join(
        json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/text-classification", "body": body}).encode()
        + b"\n"
        for cid, body in bodies.items()
    )
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with service_process(bundle, data_dir, port) as first:
        uploaded = client.files.create(file=("in.jsonl", content), purpose="batch")
        batch = client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/text-classification",  # type: ignore[arg-type]
            completion_window="24h",
        )
        deadline = time.monotonic() + 60
        while (seen := client.batches.retrieve(batch.id)).request_counts is None or seen.request_counts.completed < 80:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    assert seen.status == "in_progress" and seen.request_counts is not None
    assert seen.request_counts.completed < LINES, "the batch finished before the kill: make it longer"
    with sqlite3.connect(data_dir / "batches.sqlite3") as db:  # a chunk appended but never committed, as a kill
        (work_output,) = db.execute("SELECT work_output_id FROM batches").fetchone()  # between the two can leave it
    with (data_dir / "files" / f"{work_output}.jsonl").open("ab") as work:
        work.write(b'{"id":"batch_req_x","custom_id":"line-0","response":{"status_code":200,"body":{}},"error":null}\n')

    with service_process(bundle, data_dir, port):
        deadline = time.monotonic() + 120
        while (done := client.batches.retrieve(batch.id)).status != "completed":
            assert done.status in ("in_progress", "finalizing") and time.monotonic() < deadline, done.status
            time.sleep(0.05)
        assert done.request_counts is not None
        assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (
            LINES,
            LINES,
            0,
        )
        assert done.error_file_id is None and done.output_file_id is not None
        output = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
        assert sorted(entry["custom_id"] for entry in output) == sorted(bodies)
        with httpx.Client(base_url=url) as online:
            for entry in output:
                answer = online.post("/v1/text-classification", json=bodies[entry["custom_id"]])
                assert entry["response"]["body"] == answer.json(), entry["custom_id"]


def test_the_batch_command_answers_a_file_without_http_and_resumes_from_its_output(
    tiny_models: dict[str, TinyModel], tmp_path: Path
) -> None:
    from tests.service.apptools import real_server_for

    bundle = tiny_models["text-classification"].bundle
    bodies = {f"c{n}": {"inputs": f"review {n}: {'great' if n % 2 else 'awful'}"} for n in range(30)}
    lines = [
        {"custom_id": cid, "method": "POST", "url": "/v1/text-classification", "body": b} for cid, b in bodies.items()
    ]
    source, output, errors = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "out.errors.jsonl"
    source.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines) + b"not json\n")
    command = [
        sys.executable, "-m", "service", "batch", str(source), "--out", str(output), "--model", f"sentiment={bundle}",
        "--no-tune", "--intra-op-threads", "1", "--batch-chunk-lines", "8", "--log-level", "warning",
    ]  # fmt: skip

    def run() -> None:
        done = subprocess.run(command, cwd=REPO, capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr.decode()

    run()
    answers = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(entry["custom_id"] for entry in answers) == sorted(bodies)
    assert [json.loads(line)["error"]["code"] for line in errors.read_text().splitlines()] == ["invalid_json_line"]
    kept = output.read_bytes().splitlines(keepends=True)[:20]
    output.write_bytes(b"".join(kept) + b'{"id": "partial')  # killed mid-write, ten lines short
    run()
    resumed = [json.loads(line) for line in output.read_text().splitlines()]
    assert sorted(entry["custom_id"] for entry in resumed) == sorted(bodies)
    assert resumed[:20] == answers[:20] and len(errors.read_text().splitlines()) == 1
    with real_server_for({"sentiment": bundle}) as url:
        for entry in resumed:
            online = httpx.post(f"{url}/v1/text-classification", json=bodies[entry["custom_id"]])
            assert entry["response"]["body"] == online.json()
