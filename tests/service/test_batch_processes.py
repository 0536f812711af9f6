"""Batch jobs with ``--processes 2``: one data folder, shared by real serving processes (service/batch/locks.py).

What could fail: a batch made through the process that does not run batches never starts (nothing woke the one that
does), two runners answering one batch (lines twice), a batch stranded when the process running it dies, a store
that one process cannot see the other's files in, a signed part URL that only the signing process opens, an upload
in progress removed by a process starting beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import cohere
import httpx
import openai
import pytest

from service.batch.locks import RunnerLead, remove_orphans, writing
from tests.docker.servers import free_port
from tests.service.test_batch_api import create_batch, entries, jsonl, request_line, wait_until_finished
from tests.service.test_processes import call, processes_in, scrape, serving_children, supervisor, wait_for
from tests.service.tiny_models import TinyModel

pytestmark = pytest.mark.timeout(300)
ROUTE = "/v1/text-classification"


def private_socket(pid: int) -> Path:
    """The Unix socket a serving process serves its app on (service.processes), found from its open sockets."""
    inodes = set()
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        with_target = os.readlink(entry)
        if with_target.startswith("socket:["):
            inodes.add(with_target[len("socket:[") : -1])
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[6] in inodes and fields[7].endswith(".sock"):
            return Path(fields[7])
    raise AssertionError(f"process {pid} serves no Unix socket")


def client_of(target: int | Path) -> openai.OpenAI:
    """An OpenAI client of the public port (an int), or of one process through its private socket (a path)."""
    if isinstance(target, int):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{target}/v1", api_key="unused", max_retries=0)
    transport = httpx.HTTPTransport(uds=str(target))
    http = httpx.Client(transport=transport, timeout=30)
    return openai.OpenAI(base_url="http://process/v1", api_key="unused", max_retries=0, http_client=http)


@pytest.fixture
def batch_processes(
    text_classification_model: TinyModel, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    """Two processes serving a tiny classifier with one data folder; the supervisor, the port and the folder."""
    port, data_dir = free_port(), tmp_path / "data"
    args = ["--processes", "2", "--model", f"clf={text_classification_model.bundle}", "--data-dir", str(data_dir),
            "--batch-chunk-lines", "8", "--intra-op-threads", "1", "--no-access-log"]  # fmt: skip
    process = supervisor(args, port)
    try:
        wait_for(lambda: processes_in(scrape(port)) == {"0", "1"}, 90, "both processes did not serve")
        wait_for(lambda: RunnerLead(data_dir).holder() in serving_children(process.pid), 30, "no runner took the lead")
        yield process, port, data_dir
    finally:
        if process.poll() is None:
            process.kill()
        if process.stdout is not None and not process.stdout.closed:  # a test may have read it
            process.communicate()


def lines(count: int) -> dict[str, dict[str, str]]:
    return {f"line-{n}": {"inputs": f"sentence {n} was {'good' if n % 3 else 'not good at all'}"} for n in range(count)}


def completed(client: openai.OpenAI, batch_id: str) -> int:
    counts = client.batches.retrieve(batch_id).request_counts
    return 0 if counts is None else counts.completed


def assert_answered_once_as_online(found: list[dict], bodies: dict[str, dict[str, str]], port: int) -> None:
    by_id = {entry["custom_id"]: entry for entry in found}
    assert len(found) == len(by_id) == len(bodies)  # every line exactly once
    for custom_id in list(bodies)[:: max(1, len(bodies) // 20)]:
        status, online = call(port, ROUTE, bodies[custom_id])
        assert status == 200 and by_id[custom_id]["response"]["body"] == online


def test_a_batch_made_through_the_other_process_runs_once_in_the_runners(
    batch_processes: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    process, port, data_dir = batch_processes
    children = serving_children(process.pid)
    leader = RunnerLead(data_dir).holder()
    other = next(pid for pid in children if pid != leader)
    bodies = lines(40)
    content = jsonl([request_line(custom_id, body) for custom_id, body in bodies.items()])

    through_other = client_of(
        private_socket(other)
    )  # this process does not run batches: its store must wake the one that does
    uploaded = through_other.files.create(file=("in.jsonl", content), purpose="batch")
    started = time.monotonic()
    batch = create_batch(through_other, uploaded.id)
    public = client_of(port)
    assert public.files.retrieve(uploaded.id).bytes == len(content)  # the same store, whichever process answers
    finished = wait_until_finished(public, batch.id)
    assert finished.status == "completed", finished
    assert time.monotonic() - started < 30
    assert finished.request_counts is not None and finished.request_counts.completed == len(bodies)
    assert_answered_once_as_online(entries(public, finished.output_file_id), bodies, port)
    assert RunnerLead(data_dir).holder() == leader

    through_leader = client_of(private_socket(leader))
    assert [item.id for item in through_leader.batches.list()] == [batch.id]
    dataset = cohere.Client(api_key="unused", base_url=f"http://127.0.0.1:{port}", timeout=30).datasets.create(
        name="rows", type="embed-input", data=("rows.jsonl", jsonl([{"text": "a row"}, {"text": "another row"}]))
    )
    part = httpx.get(f"http://127.0.0.1:{port}/v1/datasets/{dataset.id}").json()["dataset"]["dataset_parts"][0]
    signed = httpx.URL(part["url"])
    for pid in children:  # a part URL one process signed opens on each: the folder's key is theirs
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(private_socket(pid)))) as http:
            downloaded = http.get(f"http://process{signed.raw_path.decode()}")
        assert downloaded.status_code == 200 and downloaded.content.startswith(b"Obj\x01")  # Avro

    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=60)[0].decode()
    assert process.returncode == 0
    assert output.count("this process runs the batch jobs") == 1, output  # only one runner ran batches
    assert "this one takes over if it ends" in output


def test_when_the_process_running_batches_dies_another_takes_over(
    batch_processes: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    process, port, data_dir = batch_processes
    leader = RunnerLead(data_dir).holder()
    assert leader is not None
    bodies = lines(2000)
    content = jsonl([request_line(custom_id, body) for custom_id, body in bodies.items()])
    public = client_of(port)
    batch = create_batch(public, public.files.create(file=("in.jsonl", content), purpose="batch").id)
    wait_for(lambda: completed(public, batch.id) >= 80, 60, "the batch did not start")

    os.kill(leader, signal.SIGKILL)
    public = client_of(port)  # the connection to the dead process went with it
    finished = wait_until_finished(public, batch.id, timeout_s=180)
    assert finished.status == "completed", finished
    assert RunnerLead(data_dir).holder() in set(serving_children(process.pid)) - {leader}
    assert_answered_once_as_online(entries(public, finished.output_file_id), bodies, port)
    wait_for(lambda: processes_in(scrape(port)) == {"0", "1"}, 90, "the dead process was not replaced")


def test_one_process_holds_the_lead_and_orphaned_parts_go(tmp_path: Path) -> None:
    first, second = RunnerLead(tmp_path), RunnerLead(tmp_path)
    assert first.take() and first.held and not second.take()
    assert second.holder() == os.getpid()
    first.release()
    assert second.take() and not first.take()
    second.release()

    orphan, live = tmp_path / "orphan.part", tmp_path / "live.part"
    orphan.write_bytes(b"left by a killed process")
    with writing(live):
        live.write_bytes(b"being written")
        assert remove_orphans(tmp_path) == [orphan]
        assert live.exists() and not orphan.exists()
    assert not live.exists()  # not renamed: removed at the end
    kept = tmp_path / "kept.jsonl"
    with writing(renamed := tmp_path / "renamed.part"):
        renamed.write_bytes(json.dumps({"done": True}).encode())
        renamed.rename(kept)
    assert kept.exists() and not renamed.exists()
