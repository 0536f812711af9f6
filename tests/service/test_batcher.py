from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import pytest

from service.batch_rows import BatchPolicy, RowOutputs, choose_rows
from service.batcher import SPARE_BATCH_SCALE, Batcher
from service.errors import InferenceError, NotReady, Overloaded, PayloadTooLarge, RequestTimeout
from service.runtime import Lane, Lanes, Worker
from service.settings import Settings
from tests.service.fakes import EchoRunner, seq


def limits(**overrides: Any) -> BatchPolicy:
    """The service's default policy with ``overrides``; no call overhead (full batches) unless one is given."""
    return dataclasses.replace(BatchPolicy.from_settings(Settings()), **{"overhead_tokens": math.inf, **overrides})


class Harness:
    def __init__(self, policy: BatchPolicy, runner: EchoRunner) -> None:
        self.batcher = Batcher(policy, "fake")
        self.runner = runner
        self.worker = Worker("fake", Lanes(Lane("fake", self.batcher, runner)), 0, token_level=runner.token_level)

    def stop(self) -> None:
        self.batcher.close(drain=False)
        if self.runner.gate is not None:
            self.runner.gate.set()
        self.worker.join(5)

    def run(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``main`` on a fresh event loop, then stop the worker whatever happened."""
        try:
            asyncio.run(main())
        finally:
            self.stop()


def make(policy: BatchPolicy | None = None, runner: EchoRunner | None = None, start: bool = True) -> Harness:
    harness = Harness(policy or limits(max_wait_s=0.001), runner or EchoRunner())
    if start:
        harness.worker.start()
    return harness


def gated(policy: BatchPolicy, poison: int | None = None) -> tuple[Harness, threading.Event]:
    """A started harness whose runner holds every batch until the returned gate is set."""
    gate = threading.Event()
    return make(policy, EchoRunner(gate=gate, poison=poison)), gate


async def hold_worker(harness: Harness) -> asyncio.Future[list[RowOutputs]]:
    """Send the one-row request ``[1]`` and wait until the worker holds it at the gate."""
    held = asyncio.ensure_future(harness.batcher.run([seq([1])]))
    await wait_until(harness.runner.entered.is_set)
    return held


def queue_then_serve(harness: Harness, lengths: list[int], token: int = 1) -> None:
    """Queue one request of one row per length (oldest first), then start the worker and wait for every answer."""

    async def main() -> None:
        pending = [harness.batcher.submit([seq([token] * n)]) for n in lengths]
        harness.worker.start()
        await asyncio.gather(*(request.future for request in pending))

    harness.run(main)


async def wait_until(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


def test_many_concurrent_submitters_each_get_their_own_rows_back() -> None:
    policy = limits(max_batch_tokens=256, max_batch_size=8, max_wait_s=0.002)
    harness = make(policy)
    rng = random.Random(0)

    async def caller(request_id: int) -> None:
        rows = [
            [request_id * 100 + row * 10 + k + 1 for k in range(rng.randint(1, 9))] for row in range(rng.randint(1, 3))
        ]
        await asyncio.sleep(rng.random() * 0.01)
        outputs = await harness.batcher.run([seq(ids) for ids in rows])
        assert len(outputs) == len(rows)
        for ids, output in zip(rows, outputs, strict=True):
            np.testing.assert_array_equal(output["echo"], np.asarray(ids) * 2)
            assert int(output["total"]) == sum(ids)

    async def main() -> None:
        await asyncio.gather(*(caller(i) for i in range(200)))

    harness.run(main)
    sizes = [batch.input_ids.shape[0] for batch in harness.runner.batches]
    assert max(sizes) > 1, "concurrent rows were never batched together"


def test_batches_respect_the_token_budget_and_size_unless_one_row_exceeds_it() -> None:
    policy = limits(max_batch_tokens=40, max_batch_size=6, max_wait_s=0.005)
    harness = make(policy, start=False)
    rng = random.Random(1)
    lengths = [rng.randint(1, 30) for _ in range(120)] + [55, 70]
    queue_then_serve(harness, lengths)
    batches = harness.runner.batches
    assert sum(batch.input_ids.shape[0] for batch in batches) == len(lengths)
    for batch in batches:
        rows, longest = batch.input_ids.shape
        assert rows <= policy.max_batch_size
        assert rows * longest <= policy.max_batch_tokens or rows == 1
    assert any(batch.input_ids.shape == (1, 70) for batch in batches)


def test_rows_are_grouped_by_length_and_sorted_within_a_batch() -> None:
    policy = limits(max_batch_tokens=10_000, max_batch_size=4, max_wait_s=0.0)
    harness = make(policy, start=False)
    lengths = [3, 40, 4, 41, 5, 42, 6, 43]  # interleaved short and long rows, oldest first
    queue_then_serve(harness, lengths, token=7)
    seen = [list(batch.lengths) for batch in harness.runner.batches]
    assert seen == [[3, 4, 5, 6], [40, 41, 42, 43]]


def test_choose_rows_keeps_the_oldest_and_groups_neighbours_in_length() -> None:
    lengths = [10, 50, 11, 49, 12, 48]
    assert sorted(choose_rows(lengths, max_tokens=1000, max_size=3)) == [0, 2, 4]
    chosen = choose_rows(lengths, max_tokens=1000, max_size=3)
    assert [lengths[k] for k in chosen] == sorted(lengths[k] for k in chosen)
    assert choose_rows([100, 1, 1], max_tokens=50, max_size=8) == [0]
    rng = random.Random(2)
    for _ in range(200):
        lengths = [rng.randint(1, 64) for _ in range(rng.randint(1, 40))]
        budget, size = rng.randint(1, 512), rng.randint(1, 16)
        chosen = choose_rows(lengths, budget, size)
        assert 0 in chosen and len(set(chosen)) == len(chosen) <= size
        assert len(chosen) * max(lengths[k] for k in chosen) <= budget or len(chosen) == 1


def test_choose_rows_splits_very_different_lengths_when_padding_costs_more_than_a_call() -> None:
    lengths = [10, 60, 11, 61, 12, 62, 13, 63]
    assert sorted(choose_rows(lengths, max_tokens=10_000, max_size=8, overhead_tokens=32)) == [0, 2, 4, 6]
    assert len(choose_rows(lengths, max_tokens=10_000, max_size=8)) == 8  # no call overhead limit: fill
    assert sorted(choose_rows([5, 20], max_tokens=100, max_size=8, overhead_tokens=32)) == [0, 1]  # call dominates
    rng = random.Random(3)
    for _ in range(200):
        lengths = [rng.randint(1, 64) for _ in range(rng.randint(1, 40))]
        chosen = choose_rows(lengths, 4096, 32, overhead_tokens=32)
        longest = max(lengths[k] for k in chosen)
        efficiency = sum(lengths[k] for k in chosen) / (len(chosen) * longest + 32)
        assert efficiency >= lengths[0] / (lengths[0] + 32)  # never worse than the oldest row alone


def test_max_wait_lets_rows_arriving_soon_after_join_the_batch() -> None:
    harness = make(limits(max_batch_tokens=1000, max_batch_size=8, max_wait_s=0.2))

    async def main() -> None:
        first = asyncio.ensure_future(harness.batcher.run([seq([1, 2])]))
        await asyncio.sleep(0.02)
        second = asyncio.ensure_future(harness.batcher.run([seq([3])]))
        await asyncio.gather(first, second)

    harness.run(main)
    assert [list(batch.lengths) for batch in harness.runner.batches] == [[1, 2]]


def test_cancelled_requests_never_reach_the_model() -> None:
    harness, gate = gated(limits(max_batch_tokens=1000, max_batch_size=1, max_wait_s=0.0))

    async def main() -> None:
        blocker = await hold_worker(harness)
        doomed = asyncio.ensure_future(harness.batcher.run([seq([666, 667]), seq([668])]))
        survivor = asyncio.ensure_future(harness.batcher.run([seq([5])]))
        await wait_until(lambda: harness.batcher.queue_depth == 3)
        doomed.cancel()
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(blocker, survivor)
        with pytest.raises(asyncio.CancelledError):
            await doomed

    harness.run(main)
    seen = harness.runner.seen_ids()
    assert {1, 5} <= seen
    assert not seen & {666, 667, 668}
    assert harness.batcher.dropped_rows == 2


def test_timeout_fails_with_request_timeout_and_the_rows_are_dropped() -> None:
    harness, gate = gated(limits(max_batch_size=1, max_wait_s=0.0))

    async def main() -> None:
        blocker = await hold_worker(harness)
        with pytest.raises(RequestTimeout) as caught:
            await harness.batcher.run([seq([777])], timeout_s=0.05)
        assert caught.value.status_code == 504
        gate.set()
        await blocker
        assert (await harness.batcher.run([seq([8])]))[0]["total"] == 8

    harness.run(main)
    assert 777 not in harness.runner.seen_ids()


def test_full_queue_is_overloaded_with_retry_after() -> None:
    harness, gate = gated(limits(max_batch_size=1, max_wait_s=0.0, max_queue=3))

    async def main() -> None:
        running = await hold_worker(harness)
        queued = asyncio.ensure_future(harness.batcher.run([seq([2]), seq([3])]))
        await wait_until(lambda: harness.batcher.queue_depth == 2)
        with pytest.raises(Overloaded) as caught:
            harness.batcher.submit([seq([4]), seq([5])])
        assert caught.value.status_code == 429
        assert int(caught.value.headers()["Retry-After"]) >= 1
        harness.batcher.submit([seq([6])])  # one more row still fits
        with pytest.raises(PayloadTooLarge):  # could never fit: retrying would not help
            harness.batcher.submit([seq([7])] * 4)
        gate.set()
        await asyncio.gather(running, queued)

    harness.run(main)


def test_a_failing_batch_fails_only_its_requests_and_the_worker_keeps_serving() -> None:
    harness, gate = gated(limits(max_batch_tokens=1000, max_batch_size=2, max_wait_s=0.0), poison=13)

    async def main() -> None:
        first = await hold_worker(harness)
        # Queued while the worker is busy: [13] and [2] form one batch, [3, 3] and [4, 4] the next.
        poisoned = asyncio.ensure_future(harness.batcher.run([seq([13])]))
        neighbour = asyncio.ensure_future(harness.batcher.run([seq([2])]))
        await wait_until(lambda: harness.batcher.queue_depth == 2)
        others = [asyncio.ensure_future(harness.batcher.run([seq([n, n])])) for n in (3, 4)]
        await wait_until(lambda: harness.batcher.queue_depth == 4)
        gate.set()
        await first
        for doomed in (poisoned, neighbour):
            with pytest.raises(InferenceError, match="poisoned batch"):
                await doomed
        for task, n in zip(others, (3, 4), strict=True):
            assert int((await task)[0]["total"]) == 2 * n
        assert int((await harness.batcher.run([seq([9])]))[0]["total"]) == 9

    harness.run(main)
    assert harness.worker.alive is False  # stopped by the harness, not by the failure
    assert harness.worker.died is None and harness.worker.failures_in_a_row == 0


class WorkerKilled(BaseException):
    pass


class DyingRunner(EchoRunner):
    def run(self, batch):  # type: ignore[no-untyped-def]
        if bool((batch.input_ids == 99).any()):
            raise WorkerKilled()
        return super().run(batch)


def test_a_dead_worker_fails_pending_requests_and_reports_not_alive() -> None:
    harness = make(limits(max_batch_size=1, max_wait_s=0.0), DyingRunner())

    async def main() -> None:
        assert int((await harness.batcher.run([seq([5])]))[0]["total"]) == 5
        assert harness.worker.alive
        with pytest.raises(NotReady):
            await harness.batcher.run([seq([99])])
        await wait_until(lambda: not harness.worker.alive)
        with pytest.raises(NotReady):
            harness.batcher.submit([seq([1])])

    harness.run(main)
    assert isinstance(harness.worker.died, WorkerKilled)


def test_close_with_drain_finishes_queued_work_and_then_refuses() -> None:
    harness = make(limits(max_batch_size=2, max_wait_s=0.0), start=False)

    async def main() -> None:
        pending = [harness.batcher.submit([seq([n])]) for n in range(1, 6)]
        harness.batcher.close(drain=True)
        harness.worker.start()
        results = await asyncio.gather(*(request.future for request in pending))
        assert [int(rows[0]["total"]) for rows in results] == [1, 2, 3, 4, 5]
        with pytest.raises(NotReady):
            harness.batcher.submit([seq([1])])

    harness.run(main)


def test_policy_takes_every_limit_from_the_settings() -> None:
    settings = Settings(max_batch_tokens=100, max_batch_size=3, max_wait_ms=5, max_queue=9, batch_overhead_tokens=7)
    policy = BatchPolicy.from_settings(settings)
    assert (policy.max_batch_tokens, policy.max_batch_size, policy.max_wait_s, policy.max_queue) == (100, 3, 0.005, 9)
    assert policy.overhead_tokens == 7 and policy.lookahead >= policy.max_batch_size
    assert BatchPolicy.from_settings(settings, max_batch_tokens=50).max_batch_tokens == 50
    defaults, default_settings = BatchPolicy.from_settings(Settings()), Settings()
    assert defaults.max_wait_s == default_settings.max_wait_ms / 1000
    assert defaults.overhead_tokens == default_settings.batch_overhead_tokens


def test_background_rows_wait_for_online_ones_and_have_no_deadline() -> None:
    harness, gate = gated(limits(max_batch_size=1, max_wait_s=0.0))

    async def main() -> None:
        blocker = await hold_worker(harness)
        background = [asyncio.ensure_future(harness.batcher.run([seq([10 + k])], 0.01, spare=True)) for k in range(3)]
        await asyncio.sleep(0)
        online = [asyncio.ensure_future(harness.batcher.run([seq([20 + k])])) for k in range(2)]
        await wait_until(lambda: harness.batcher.queue_depth == 2)  # the background rows are not online work
        await asyncio.sleep(0.05)  # past the timeout the background requests asked for: they have none
        gate.set()
        await asyncio.gather(blocker, *online, *background)

    harness.run(main)
    order = [int(batch.input_ids[0, 0]) for batch in harness.runner.batches]
    assert order == [1, 20, 21, 10, 11, 12]  # queued later, the online rows still ran first


def test_background_batches_stay_short_beside_online_rows_and_grow_past_the_batch_size_without_them() -> None:
    harness = make(limits(max_batch_size=8, max_wait_s=0.0), start=False)

    async def main() -> None:
        await asyncio.sleep(0)
        harness.worker.start()
        await harness.batcher.run([seq([1])])  # online just now
        await harness.batcher.run([seq([10 + k]) for k in range(8)], spare=True)
        await asyncio.sleep(0.3)  # no online row for longer than ONLINE_RECENT_S
        await harness.batcher.run([seq([30 + k]) for k in range(40)], spare=True)

    harness.run(main)
    sizes = [batch.input_ids.shape[0] for batch in harness.runner.batches]
    assert sizes == [1, 2, 2, 2, 2, 8 * SPARE_BATCH_SCALE, 40 - 8 * SPARE_BATCH_SCALE]
