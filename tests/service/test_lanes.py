"""One pool of workers serving several queues (a LoRA base's and its adapters'): each batch comes from one queue and
runs on that queue's runner, queues are served in turn, a queue added while the workers wait is served, and a queue
closed leaves the others served; the workers end when every queue is closed and drained."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from service.batcher import Batcher
from service.runtime import Lane, Lanes, Worker
from tests.service.fakes import EchoRunner, seq
from tests.service.test_batcher import limits, wait_until


def pool(count: int, workers: int = 1) -> tuple[list[Batcher], list[EchoRunner], Lanes, list[Worker]]:
    """``count`` queues on one lock, each with a runner of its own, served by ``workers`` started workers."""
    first = Batcher(limits(max_batch_size=4, max_wait_s=0.0), "base")
    batchers = [first] + [
        Batcher(limits(max_batch_size=4, max_wait_s=0.0), f"base:a{k}", lock=first.lock) for k in range(1, count)
    ]
    runners = [EchoRunner() for _ in batchers]
    lanes = Lanes(Lane(batchers[0].name, batchers[0], runners[0]))
    for batcher, runner in zip(batchers[1:], runners[1:], strict=True):
        lanes.add(Lane(batcher.name, batcher, runner))
    threads = [Worker("base", lanes, 0, EchoRunner.token_level, number) for number in range(workers)]
    for worker in threads:
        worker.start()
    return batchers, runners, lanes, threads


def stop(batchers: list[Batcher], threads: list[Worker]) -> None:
    for batcher in batchers:
        batcher.close(drain=False)
    for worker in threads:
        worker.join(5)
    assert not any(worker.alive for worker in threads)


def test_each_queue_runs_on_its_own_runner_and_batches_never_mix_queues() -> None:
    batchers, runners, _, threads = pool(3, workers=2)

    async def main() -> None:
        requests = [batchers[k % 3].run([seq([100 * (k % 3) + 1] * (1 + k % 5))]) for k in range(60)]
        answers = await asyncio.gather(*requests)
        for k, rows in enumerate(answers):
            np.testing.assert_array_equal(rows[0]["echo"], np.full(1 + k % 5, 2 * (100 * (k % 3) + 1)))

    try:
        asyncio.run(main())
    finally:
        stop(batchers, threads)
    for queue, runner in enumerate(runners):
        assert runner.batches, f"queue {queue} never ran"
        assert runner.seen_ids() == {100 * queue + 1}  # its own rows only, and only on its own runner


def test_queues_are_served_in_turn() -> None:
    gate = threading.Event()
    batchers, runners, _, threads = pool(2)
    runners[0].gate = gate  # the worker holds the first batch, while both queues fill

    async def main() -> None:
        first = asyncio.ensure_future(batchers[0].run([seq([1])]))
        await wait_until(runners[0].entered.is_set)
        pending = [asyncio.ensure_future(b.run([seq([7])])) for _ in range(8) for b in batchers]
        await asyncio.sleep(0.05)
        gate.set()
        await asyncio.gather(first, *pending)

    order: list[str] = []
    for runner, name in zip(runners, ("base", "adapter"), strict=True):
        original = runner.run

        def recording(batch, original=original, name=name):  # type: ignore[no-untyped-def]
            order.append(name)
            return original(batch)

        runner.run = recording  # type: ignore[method-assign]
    try:
        asyncio.run(main())
    finally:
        stop(batchers, threads)
    assert order[:4] == ["base", "adapter", "base", "adapter"], order


def test_a_queue_added_while_the_workers_wait_is_served_and_a_closed_one_leaves() -> None:
    batchers, _, lanes, threads = pool(1)
    late = Batcher(limits(max_wait_s=0.0), "base:late", lock=batchers[0].lock)
    runner = EchoRunner()

    async def main() -> None:
        await wait_until(lambda: batchers[0].idle_workers == 1)  # parked on the first queue alone
        lanes.add(Lane(late.name, late, runner))
        assert (await late.run([seq([5, 6])]))[0]["total"] == 11
        batchers[0].close()
        await asyncio.sleep(0.05)
        assert all(worker.alive for worker in threads)  # the late queue is still served
        assert (await late.run([seq([2])]))[0]["total"] == 2

    try:
        asyncio.run(main())
    finally:
        late.close()
        for worker in threads:
            worker.join(5)
    assert not any(worker.alive for worker in threads)  # every queue closed and drained: the workers end
    assert lanes.lanes == []
