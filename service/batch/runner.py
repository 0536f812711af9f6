"""The batch runner: one background task, started and stopped by the core's owner (the HTTP app's lifespan), that
takes the oldest unfinished batch and runs its lines in chunks of ``batch_chunk_lines``.

- One runner per data folder runs batches: the one whose process holds the folder's lead (``RunnerLead``). With
  several serving processes the others' runners wait, and one of them takes over (resuming from the last commit) when
  that process ends; any process's routes create and cancel batches, which the leader sees as the database changes.

- Each line goes to ``call`` (the HTTP side's route machinery: the route's request model, ``run_inference``, the
  route's answer), concurrently within a chunk so the batcher can group them; a transient refusal (``TryLater``:
  queue full, deadline, model restarting) is retried after its delay, up to ``MAX_TRIES`` times.
- ``CHUNKS_AHEAD`` chunks are answered at once, so the batcher has the next chunk's rows while a chunk's last rows
  run and its entries are synced; chunks are committed in order.
- A chunk's entries are appended and synced, then its progress is committed (``BatchStore.commit_chunk``): a process
  killed at any point resumes after the last committed chunk, and each line has exactly one entry.
- Spare capacity first: a line's request is a background one (``InferenceRequest.background``): its rows wait in the
  batcher's background queue and run only while no online row is queued. Before each chunk the runner also waits
  while online work is in flight or queued (``busy``), for at most ``MAX_YIELD_S``.
- Cancelling, expiry (the completion window) and the end of the input are checked between chunks.
- A batch that runs another API's job (Cohere's embed jobs: ``origin``) ends with that API's finalizer, which makes
  its answer of the work files while the batch is still finalizing.

Nothing here logs a line's content: only batch ids, counts and error types.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from service.batch.lines import (
    BATCH_EXPIRED,
    DUPLICATE_CUSTOM_ID,
    Plan,
    Unsendable,
    answered,
    plan_lines,
    read_line,
    read_spans,
    unanswered,
)
from service.batch.records import CANCELLED, CANCELLING, COMPLETED, EXPIRED, IN_PROGRESS, VALIDATING, BatchRecord
from service.batch.store import BatchStore, now
from service.core import ServiceCore
from service.errors import ServiceError

logger = logging.getLogger(__name__)

MAX_TRIES = 20  # a line refused this many times for a transient reason gets that refusal as its answer
MAX_YIELD_S = 1.0  # the longest a chunk waits for online work to clear
IDLE_POLL_S = 0.25  # with nothing to do, look whether another process changed the database this often (or when woken)
LEAD_POLL_S = 1.0  # a runner without the lead tries to take it this often
BUSY_POLL_S = 0.005
CHUNKS_AHEAD = 2  # chunks answered at once: the next chunk's rows reach the batcher while one chunk's tail runs


@dataclass(frozen=True, slots=True)
class Answer:
    status_code: int
    body: Any  # a JSON value, or the route's answer as written (``service.batch.lines.EncodedJson``)


class TryLater(Exception):
    """A transient refusal: try the line again after ``retry_after_s``; ``answer`` is what to record if it keeps
    being refused."""

    def __init__(self, retry_after_s: float, answer: Answer) -> None:
        super().__init__(f"try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s
        self.answer = answer


Ahead = deque[tuple[range, "asyncio.Task[list[tuple[bool, bytes]]]"]]  # chunks being answered: line numbers, entries
LineCall = Callable[[str, Any], Awaitable[Answer]]  # (url, body) -> the route's answer; raises TryLater
Finalizer = Callable[[BatchRecord], None]  # another API's job: its answer made of a batch's work files (blocking)


def online_work(core: ServiceCore) -> bool:
    """Whether online requests are in flight (holding a permit) or rows wait in any model's queue."""
    engines = core.registry.engines.values()
    return core.permits.held > 0 or any(engine.batcher.queue_depth > 0 for engine in engines)


class BatchRunner:
    def __init__(
        self,
        store: BatchStore,
        core: ServiceCore,
        call: LineCall,
        busy: Callable[[], bool] | None = None,
        finalizers: Mapping[str, Finalizer] | None = None,
    ) -> None:
        self.store = store
        self.core = core
        self.call = call
        self.finalizers = dict(finalizers or {})  # origin -> what runs between finalizing and completed
        self.busy = busy if busy is not None else lambda: online_work(core)
        self.chunk_lines = core.settings.batch_chunk_lines
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Future[Any]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="bertserve-batch-runner")
        self._task.add_done_callback(_log_stop)

    def wake(self) -> None:
        """A batch was created or cancelled: look now."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop between or within chunks (an uncommitted chunk is run again on the next start); a write under way
        ends first, so the lead passes on with the folder as a commit left it."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.gather(*self._writes, return_exceptions=True)
        self.store.close()

    async def _run(self) -> None:
        await self._take_lead()
        try:
            while True:
                batch = self.store.next_unfinished()
                if batch is None:
                    await self._idle()
                    continue
                try:
                    await self.run_batch(batch)
                except (OSError, ValueError, sqlite3.Error, ServiceError) as exc:  # data folder or input unreadable
                    logger.exception("batch %s failed", batch.id)
                    self.store.fail(batch.id, "batch_failed", f"the batch could not be run: {type(exc).__name__}")
        except Exception:  # a bug stopped this runner (_log_stop says so): another process's may take over
            await asyncio.gather(*self._writes, return_exceptions=True)
            self.store.lead.release()
            raise

    async def _take_lead(self) -> None:
        """Wait until this process is ready and holds the folder's lead (another process's runner may hold it)."""
        waiting = False
        while not (self.core.ready and self.store.lead.take()):
            if self.core.ready and not waiting:
                holder = self.store.lead.holder()
                logger.info("batch jobs run in the process of pid %s; this one takes over if it ends", holder)
                waiting = True
            await asyncio.sleep(LEAD_POLL_S if waiting else 0.1)
        logger.info("this process runs the batch jobs of %s", self.store.folder)

    async def _idle(self) -> None:
        """Return when woken (a batch made or cancelled here) or when another process committed a change."""
        self._wake.clear()
        version = self.store.data_version()
        while self.store.data_version() == version:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(IDLE_POLL_S):
                    await self._wake.wait()
                    return

    async def _write(self, write: Callable[..., Any], *args: Any) -> Any:
        """A blocking write of the folder, in a thread; finished even if the runner stops meanwhile (``stop`` waits)."""
        future = asyncio.ensure_future(asyncio.to_thread(write, *args))
        self._writes.add(future)
        future.add_done_callback(self._writes.discard)
        return await asyncio.shield(future)

    async def run_batch(self, batch: BatchRecord) -> None:
        """Run ``batch`` to its end (completed, cancelled, expired or failed), from its last committed chunk."""
        if batch.status == CANCELLING:
            await self._write(self.store.resume, batch)
            await self._write(self.store.finish, batch.id, CANCELLED)
            return
        source = self.store.path_of(batch.input_file_id)
        try:
            plan = await asyncio.to_thread(plan_lines, source)
        except FileNotFoundError:
            self.store.fail(batch.id, "input_file_missing", f"the input file {batch.input_file_id} is gone")
            return
        if batch.status == VALIDATING:
            if not plan.spans:
                self.store.fail(batch.id, "empty_file", "the input file holds no requests")
                return
            if not self.store.move(batch.id, IN_PROGRESS, (VALIDATING,), total=len(plan)):
                await self.run_batch(self.store.batch(batch.id))  # cancelled meanwhile
                return
            logger.info("batch %s: %d requests to %s", batch.id, len(plan), batch.endpoint)
        batch = self.store.batch(batch.id)
        await self._write(self.store.resume, batch)
        ahead: Ahead = deque()
        try:
            while batch.done_lines < len(plan):
                if batch.status == CANCELLING:
                    await _cancel_all(ahead)
                    await self._write(self.store.finish, batch.id, CANCELLED)
                    logger.info("batch %s cancelled after %d of %d requests", batch.id, batch.done_lines, len(plan))
                    return
                if now() >= batch.expires_at:
                    await _cancel_all(ahead)
                    await self._expire(batch, plan)
                    return
                if not ahead:
                    await self._wait_for_spare_capacity()
                self._answer_ahead(ahead, batch, plan, source)
                numbers, answering = ahead.popleft()
                batch = await self._commit_chunk(batch, numbers, await answering)
        finally:
            await _cancel_all(ahead)
        if self.store.finalizing(batch.id):
            finalizer = self.finalizers.get(batch.origin)
            if finalizer is not None:  # a process killed within it runs it again: the batch is still finalizing
                await self._write(finalizer, self.store.batch(batch.id))
            await self._write(self.store.finish, batch.id, COMPLETED)
            logger.info("batch %s completed: %d ok, %d failed", batch.id, batch.completed, batch.failed)
        else:
            await self._write(self.store.finish, batch.id, CANCELLED)

    async def _wait_for_spare_capacity(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MAX_YIELD_S
        while self.busy() and loop.time() < deadline:
            await asyncio.sleep(BUSY_POLL_S)

    def _answer_ahead(self, ahead: Ahead, batch: BatchRecord, plan: Plan, source: Any) -> None:
        """Start answering chunks after the last one started until ``CHUNKS_AHEAD`` are under way."""
        start = ahead[-1][0].stop if ahead else batch.done_lines
        while len(ahead) < CHUNKS_AHEAD and start < len(plan):
            numbers = range(start, min(start + self.chunk_lines, len(plan)))
            ahead.append((numbers, asyncio.create_task(self._answer_chunk(batch, numbers, plan, source))))
            start = numbers.stop

    async def _answer_chunk(
        self, batch: BatchRecord, numbers: range, plan: Plan, source: Any
    ) -> list[tuple[bool, bytes]]:
        raws = await asyncio.to_thread(read_spans, source, [plan.spans[number] for number in numbers])
        return await asyncio.gather(
            *(self._entry(batch, number, raw, plan) for number, raw in zip(numbers, raws, strict=True))
        )

    async def _commit_chunk(self, batch: BatchRecord, numbers: range, entries: list[tuple[bool, bytes]]) -> BatchRecord:
        output = b"".join(entry for ok, entry in entries if ok)
        errors = b"".join(entry for ok, entry in entries if not ok)
        completed = sum(1 for ok, _ in entries if ok)
        return await self._write(
            self.store.commit_chunk, batch, numbers.stop, output, errors, completed, len(entries) - completed
        )

    async def _entry(self, batch: BatchRecord, number: int, raw: bytes, plan: Plan) -> tuple[bool, bytes]:
        return await line_entry(self.call, batch.id, (batch.endpoint,), number, raw, plan)

    async def _expire(self, batch: BatchRecord, plan: Plan) -> None:
        """The completion window has passed: every line not answered gets a ``batch_expired`` entry."""
        source = self.store.path_of(batch.input_file_id)
        numbers = range(batch.done_lines, len(plan))
        raws = await asyncio.to_thread(read_spans, source, [plan.spans[number] for number in numbers])
        message = "the request was not run before the batch's completion window ended"
        errors = b"".join(
            unanswered(batch.id, number, line.custom_id, BATCH_EXPIRED, message)
            for number, line in zip(numbers, (read_line(raw, (batch.endpoint,)) for raw in raws), strict=True)
        )
        await self._write(self.store.commit_chunk, batch, len(plan), b"", errors, 0, len(numbers))
        await self._write(self.store.finish, batch.id, EXPIRED)
        logger.info("batch %s expired with %d requests not run", batch.id, len(numbers))


async def line_entry(
    call: LineCall, batch_id: str, urls: Collection[str], number: int, raw: bytes, plan: Plan
) -> tuple[bool, bytes]:
    """Line ``number``'s entry, and whether it goes to the output file (a 200) or the error file."""
    line = read_line(raw, urls)
    if isinstance(line, Unsendable):
        return False, unanswered(batch_id, number, line.custom_id, line.code, line.message)
    if number in plan.repeats:
        message = f"custom_id {line.custom_id!r} is used by request {plan.repeats[number] + 1} already"
        return False, unanswered(batch_id, number, line.custom_id, DUPLICATE_CUSTOM_ID, message)
    answer = await answer_with_retries(call, line.url, line.body)
    entry = answered(batch_id, number, line.custom_id, answer.status_code, answer.body)
    return answer.status_code == 200, entry


async def answer_with_retries(call: LineCall, url: str, body: Any) -> Answer:
    """The route's answer; a transient refusal waited out and tried again, ``MAX_TRIES`` times in all."""
    for _ in range(MAX_TRIES - 1):
        try:
            return await call(url, body)
        except TryLater as refused:
            await asyncio.sleep(refused.retry_after_s)
    try:
        return await call(url, body)
    except TryLater as refused:
        return refused.answer


async def _cancel_all(ahead: Ahead) -> None:
    """Stop the chunks answered ahead of the last commit (their lines run again on resume, if ever)."""
    for _, answering in ahead:
        answering.cancel()
    await asyncio.gather(*(answering for _, answering in ahead), return_exceptions=True)
    ahead.clear()


def _log_stop(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.critical(
            "the batch runner stopped: no batch runs here until a restart (another serving process's runner, if any, "
            "takes over)",
            exc_info=task.exception(),
        )
