"""The batch runner over a real store, with a line call of the test's own in place of the routes: chunks answered
ahead of the last commit, committed in order, and stopped by a cancel; batches run only with the folder's lead, and
a stop finishes the write under way before the lead passes on."""

from __future__ import annotations

import asyncio
import io
import json
import os
import threading
from pathlib import Path
from typing import Any

from service.batch.locks import RunnerLead
from service.batch.records import CANCELLED, COMPLETED
from service.batch.runner import CHUNKS_AHEAD, LEAD_POLL_S, Answer, BatchRunner
from service.batch.store import BatchStore
from service.core import ServiceCore
from service.settings import Settings

OWNER, URL, CHUNK = "owner", "/v1/embeddings", 4


class HeldCalls:
    """A line call that answers line k only once the test lets lines below k through; it notes which lines are in
    flight and how many calls were cancelled."""

    def __init__(self) -> None:
        self.in_flight: set[int] = set()
        self.most_in_flight = 0
        self.cancelled = 0
        self.below = 0
        self.moved = asyncio.Condition()

    async def release_below(self, number: int) -> None:
        async with self.moved:
            self.below = number
            self.moved.notify_all()

    async def __call__(self, url: str, body: Any) -> Answer:
        number = int(body["input"].split()[1])
        self.in_flight.add(number)
        self.most_in_flight = max(self.most_in_flight, len(self.in_flight))
        try:
            async with self.moved:
                await self.moved.wait_for(lambda: number < self.below)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight.discard(number)
        return Answer(200, {"echo": body["input"]})


async def wait_for_lines_in_flight(calls: HeldCalls, count: int) -> None:
    async with asyncio.timeout(5):
        while len(calls.in_flight) < count:
            await asyncio.sleep(0.001)


def store_with_batch(tmp_path: Path, lines: int) -> tuple[BatchStore, ServiceCore, str]:
    settings = Settings(data_dir=tmp_path, batch_chunk_lines=CHUNK)
    store = BatchStore(tmp_path, settings)
    content = "".join(
        json.dumps({"custom_id": f"line-{k}", "method": "POST", "url": URL, "body": {"input": f"text {k}"}}) + "\n"
        for k in range(lines)
    )
    upload = store.add_upload(OWNER, "input.jsonl", "batch", io.BytesIO(content.encode()))
    batch = store.create_batch(OWNER, upload.id, URL, "24h", None)
    return store, ServiceCore(settings, engines={}), batch.id


def output_ids(store: BatchStore, batch_id: str) -> list[str]:
    batch = store.batch(batch_id)
    if batch.output_file_id is None:
        return []
    lines = store.path_of(batch.output_file_id).read_text().splitlines()
    return [json.loads(line)["custom_id"] for line in lines]


def test_chunks_are_answered_ahead_and_committed_in_order(tmp_path: Path) -> None:
    lines = 3 * CHUNK + 1
    store, core, batch_id = store_with_batch(tmp_path, lines)
    calls = HeldCalls()

    async def main() -> None:
        running = asyncio.create_task(
            BatchRunner(store, core, calls, busy=lambda: False).run_batch(store.batch(batch_id))
        )
        await wait_for_lines_in_flight(calls, CHUNKS_AHEAD * CHUNK)
        assert store.batch(batch_id).done_lines == 0  # the next chunk's lines went out before the first commit
        await calls.release_below(CHUNK + 1)  # the first chunk and one line of the second
        async with asyncio.timeout(5):
            while store.batch(batch_id).done_lines < CHUNK:
                await asyncio.sleep(0.001)
        await wait_for_lines_in_flight(calls, CHUNKS_AHEAD * CHUNK - 1)  # the third chunk went out after the commit
        assert store.batch(batch_id).done_lines == CHUNK
        await calls.release_below(lines)
        await running

    asyncio.run(main())
    assert calls.most_in_flight == CHUNKS_AHEAD * CHUNK
    batch = store.batch(batch_id)
    assert (batch.status, batch.completed, batch.failed) == (COMPLETED, lines, 0)
    assert output_ids(store, batch_id) == [f"line-{k}" for k in range(lines)]
    store.close()


def test_a_cancel_after_a_commit_stops_the_chunk_answered_ahead(tmp_path: Path) -> None:
    store, core, batch_id = store_with_batch(tmp_path, 4 * CHUNK)
    calls = HeldCalls()

    async def main() -> None:
        running = asyncio.create_task(
            BatchRunner(store, core, calls, busy=lambda: False).run_batch(store.batch(batch_id))
        )
        await wait_for_lines_in_flight(calls, CHUNKS_AHEAD * CHUNK)
        store.cancel(OWNER, batch_id)
        await calls.release_below(CHUNK)
        await running

    asyncio.run(main())
    assert calls.cancelled == CHUNK  # the second chunk's lines, in flight when the first was committed
    batch = store.batch(batch_id)
    assert (batch.status, batch.completed, batch.done_lines) == (CANCELLED, CHUNK, CHUNK)
    assert output_ids(store, batch_id) == [f"line-{k}" for k in range(CHUNK)]
    store.close()


async def ready_core(core: ServiceCore) -> None:
    await core.start()
    async with asyncio.timeout(5):
        while not core.ready:
            await asyncio.sleep(0.01)


def test_a_runner_runs_batches_only_with_the_lead_and_takes_it_over(tmp_path: Path) -> None:
    """Another holder of the folder's lead (another process's runner) keeps this runner off the batch; a core that
    is not ready (draining) never takes the lead; once the holder lets go, this runner takes over and finishes."""
    store, core, batch_id = store_with_batch(tmp_path, 2 * CHUNK)
    calls = HeldCalls()
    other = RunnerLead(tmp_path)

    async def main() -> None:
        runner = BatchRunner(store, core, calls, busy=lambda: False)
        runner.start()
        await asyncio.sleep(0.3)
        assert not store.lead.held  # not ready: no lead taken
        assert other.take()
        await ready_core(core)
        await asyncio.sleep(LEAD_POLL_S + 0.3)
        assert not store.lead.held and not calls.in_flight
        other.release()
        await calls.release_below(2 * CHUNK)
        async with asyncio.timeout(10):
            while store.batch(batch_id).status != COMPLETED:
                await asyncio.sleep(0.01)
        assert store.lead.held and RunnerLead(tmp_path).holder() == os.getpid()
        await runner.stop()
        await core.stop()

    asyncio.run(main())
    assert RunnerLead(tmp_path).take()  # stop let go of it


def test_stop_lets_a_write_under_way_finish_before_the_lead_passes_on(tmp_path: Path) -> None:
    store, core, batch_id = store_with_batch(tmp_path, 2 * CHUNK)
    calls = HeldCalls()
    entered, go = threading.Event(), threading.Event()
    commit_chunk = store.commit_chunk

    def slow_commit(*args: Any) -> Any:
        entered.set()
        go.wait(10)
        return commit_chunk(*args)

    store.commit_chunk = slow_commit  # type: ignore[method-assign]

    async def main() -> None:
        await ready_core(core)
        runner = BatchRunner(store, core, calls, busy=lambda: False)
        runner.start()
        await calls.release_below(2 * CHUNK)
        async with asyncio.timeout(5):
            while not entered.is_set():
                await asyncio.sleep(0.01)
        stopping = asyncio.create_task(runner.stop())
        await asyncio.sleep(0.2)
        assert not stopping.done() and not RunnerLead(tmp_path).take()  # the write holds the lead
        go.set()
        await stopping
        await core.stop()

    asyncio.run(main())
    reopened = BatchStore(tmp_path, store.settings)
    assert reopened.batch(batch_id).done_lines >= CHUNK  # the chunk under way was committed
    assert reopened.lead.take()
    reopened.close()


def test_a_runner_that_fails_lets_go_of_the_lead(tmp_path: Path) -> None:
    """A bug that ends the runner's task leaves the folder's lead free for another process's runner."""
    store, core, _ = store_with_batch(tmp_path, CHUNK)

    def broken() -> None:
        raise RuntimeError("a bug")

    store.next_unfinished = broken  # type: ignore[assignment, method-assign]

    async def main() -> None:
        await ready_core(core)
        runner = BatchRunner(store, core, HeldCalls(), busy=lambda: False)
        runner.start()
        assert runner._task is not None
        async with asyncio.timeout(5):
            while not runner._task.done():
                await asyncio.sleep(0.01)
        assert isinstance(runner._task.exception(), RuntimeError)
        assert not store.lead.held and RunnerLead(tmp_path).take()
        await core.stop()

    asyncio.run(main())
    store.close()
