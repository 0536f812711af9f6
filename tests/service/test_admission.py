"""Admission by cost: work that cannot end in time is refused before it runs, and expired rows never run."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

from service.batcher import ADMIT_WITHIN
from service.errors import Overloaded, PayloadTooLarge, RequestTimeout
from service.model_rate import RATE_STALE_S
from service.prepare_stage import DecodeShare
from service.settings import Settings
from tests.service.apptools import gate_engine, serving
from tests.service.fakes import EchoRunner, seq
from tests.service.test_api import assert_error
from tests.service.test_batcher import limits, make, wait_until
from tests.service.tiny_models import TinyModel

TIMEOUT_S = 10.0  # with one millisecond per token: a budget of ADMIT_WITHIN x 10 s = 4,000 tokens


def rows_of(tokens: int, marker: int, length: int = 500) -> list:
    """``tokens`` tokens as rows of ``length`` ids, every id ``marker`` (so the runner's record tells them apart)."""
    return [seq([marker] * length) for _ in range(tokens // length)]


def test_a_request_that_alone_cannot_end_in_time_is_refused_with_413_and_never_runs() -> None:
    runner = EchoRunner()
    harness = make(limits(max_batch_tokens=100_000, max_batch_size=64), runner)
    harness.batcher.rate.record(1000, 1.0)  # one millisecond per token

    async def main() -> None:
        assert ADMIT_WITHIN * TIMEOUT_S == 4.0
        with pytest.raises(PayloadTooLarge, match="fewer or shorter inputs") as refused:
            harness.batcher.submit(rows_of(4500, marker=7), TIMEOUT_S)
        assert "4500 tokens" in refused.value.message and "4 s" in refused.value.message
        outputs = await harness.batcher.run(rows_of(3500, marker=8), TIMEOUT_S)
        assert len(outputs) == 7

    try:
        asyncio.run(main())
    finally:
        harness.stop()
    assert 7 not in runner.seen_ids() and 8 in runner.seen_ids()
    assert harness.batcher.shed["too_big"] == 1


def test_work_queued_past_the_budget_gets_429_with_retry_after_from_the_queue() -> None:
    gate = threading.Event()
    runner = EchoRunner(gate=gate)
    harness = make(limits(max_batch_tokens=100_000, max_batch_size=64), runner)
    harness.batcher.rate.record(1000, 1.0)

    async def main() -> None:
        running = asyncio.ensure_future(harness.batcher.run([seq([1])], TIMEOUT_S))
        await wait_until(runner.entered.is_set)
        queued = [
            asyncio.ensure_future(harness.batcher.run(rows_of(tokens, marker), TIMEOUT_S))
            for tokens, marker in ((2000, 2), (1500, 3))
        ]
        await wait_until(lambda: harness.batcher.queue_depth == 7)
        with pytest.raises(Overloaded, match=r"3\.5 s of work queued") as refused:
            harness.batcher.submit(rows_of(2500, marker=4), TIMEOUT_S)
        assert refused.value.retry_after_s == 2  # 3.5 s queued + 2.5 s of its own, against a 4 s budget
        assert refused.value.headers() == {"Retry-After": "2"}
        small = asyncio.ensure_future(harness.batcher.run(rows_of(400, 5, length=400), TIMEOUT_S))  # 3.5 + 0.4 fits
        await wait_until(lambda: harness.batcher.queue_depth == 8)
        gate.set()
        await asyncio.gather(running, *queued, small)

    try:
        asyncio.run(main())
    finally:
        harness.stop()
    assert 4 not in runner.seen_ids() and {2, 3, 5} <= runner.seen_ids()
    assert harness.batcher.shed["over_budget"] == 1


def test_rows_whose_deadline_passed_while_queued_never_reach_the_model() -> None:
    gate = threading.Event()
    runner = EchoRunner(gate=gate)
    harness = make(limits(max_batch_size=1), runner)

    async def main() -> None:
        running = asyncio.ensure_future(harness.batcher.run([seq([1])]))
        await wait_until(runner.entered.is_set)
        late = asyncio.ensure_future(harness.batcher.run([seq([66])], 0.05))
        await asyncio.sleep(0)  # queued
        assert harness.batcher.queue_depth == 1
        # Block the event loop past the deadline, so its timer cannot drop the row: the batcher itself must.
        time.sleep(0.1)
        gate.set()
        deadline = time.monotonic() + 5
        while harness.batcher.queue_depth and time.monotonic() < deadline:
            time.sleep(0.005)
        await running
        with pytest.raises(RequestTimeout):
            await late

    try:
        asyncio.run(main())
    finally:
        harness.stop()
    assert 66 not in runner.seen_ids()
    assert harness.batcher.shed["expired"] == 1


def test_the_rate_comes_from_batches_large_enough_to_tell() -> None:
    harness = make(limits(max_batch_tokens=8192), start=False)
    batcher = harness.batcher
    assert batcher.seconds_per_token is None and batcher.estimate_seconds(1000, 1) is None
    batcher.rate.record(10, 1.0)  # a tiny batch is mostly call overhead: ignored
    assert batcher.seconds_per_token is None
    batcher.rate.record(1000, 1.0)
    batcher.rate.record(1000, 2.0)
    assert batcher.seconds_per_token == pytest.approx(0.8 * 0.001 + 0.2 * 0.002)


def test_a_request_that_fits_at_the_models_best_rate_gets_429_not_413_while_the_rate_is_slow() -> None:
    """A rate measured while other work shared the cores says nothing about the request itself: 413 (send less) is
    decided at the best rate the model has shown, the slow rate only refuses for now (429, retry)."""
    harness = make(limits(max_batch_tokens=100_000, max_batch_size=64), EchoRunner())
    batcher = harness.batcher
    batcher.rate.record(1000, 1.0)  # alone: one millisecond per token
    for _ in range(20):
        batcher.rate.record(1000, 4.0)  # then four, with the cores shared
    assert batcher.seconds_per_token == pytest.approx(0.004, rel=0.05)

    async def main() -> None:
        with pytest.raises(Overloaded, match="would not end within") as refused:
            batcher.submit(rows_of(3000, marker=7), TIMEOUT_S)  # 12 s now, 3 s alone: within the 4 s budget
        assert refused.value.retry_after_s >= 1
        with pytest.raises(PayloadTooLarge, match=r"4500 tokens need about 4\.5 s"):
            batcher.submit(rows_of(4500, marker=8), TIMEOUT_S)  # too big even alone

    try:
        asyncio.run(main())
    finally:
        harness.stop()
    assert batcher.shed["over_budget"] == 1 and batcher.shed["too_big"] == 1


def test_a_slow_rate_that_refuses_everything_relaxes_back_to_the_best_one() -> None:
    """Refused requests run no batch, so nothing would measure the rate again: without a batch measured, the
    estimate goes back towards the model's best rate, and the request refused before is admitted."""
    runner = EchoRunner()
    harness = make(limits(max_batch_tokens=100_000, max_batch_size=64), runner)
    batcher = harness.batcher
    batcher.rate.record(1000, 1.0)
    for _ in range(20):
        batcher.rate.record(1000, 4.0)

    async def main() -> None:
        with pytest.raises(Overloaded):
            batcher.submit(rows_of(3000, marker=7), TIMEOUT_S)
        batcher.rate.measured_at -= RATE_STALE_S  # one RATE_STALE_S without a batch: (1 - 1/e) of the way back
        assert batcher.seconds_per_token == pytest.approx(0.001 + 0.003 / math.e, rel=0.05)
        with pytest.raises(Overloaded):
            batcher.submit(rows_of(3000, marker=7), TIMEOUT_S)  # 2.1 ms a token: still over the budget
        batcher.rate.measured_at -= 3 * RATE_STALE_S
        assert batcher.seconds_per_token == pytest.approx(0.001, rel=0.06)
        outputs = await batcher.run(rows_of(3000, marker=9), TIMEOUT_S)
        assert len(outputs) == 6

    try:
        asyncio.run(main())
    finally:
        harness.stop()
    assert 7 not in runner.seen_ids() and 9 in runner.seen_ids()


def test_the_decoding_a_request_will_need_is_kept_out_of_its_model_budget() -> None:
    """A request's deadline covers its decoding after the model: with ``reserve_s`` of it kept for that, model work
    that would fit the whole deadline's budget but not what is left of it is refused (429) before it runs."""
    runner = EchoRunner()
    harness = make(limits(max_batch_tokens=100_000, max_batch_size=64), runner)
    harness.batcher.rate.record(1000, 1.0)

    async def main() -> None:
        with pytest.raises(Overloaded, match="would not end within"):
            harness.batcher.submit(rows_of(3500, marker=7), TIMEOUT_S, reserve_s=2.0)  # 3.5 s > 0.4 x (10 - 2) s
        outputs = await harness.batcher.run(rows_of(3000, marker=8), TIMEOUT_S, reserve_s=2.0)  # 3 s <= 3.2 s
        assert len(outputs) == 6

    try:
        asyncio.run(main())
    finally:
        harness.stop()
    assert 7 not in runner.seen_ids() and 8 in runner.seen_ids()
    assert harness.batcher.shed["over_budget"] == 1 and harness.batcher.shed["too_big"] == 0


def test_the_decode_share_is_decoding_seconds_per_tokenizing_second() -> None:
    share = DecodeShare()
    assert share.seconds(0.5) == 0.0  # nothing reserved until measured
    share.observe(0.25, 0.5)
    assert share.seconds(0.5) == pytest.approx(1.0)
    share.observe(0.5, 0.5)
    assert share.seconds(1.0) == pytest.approx(0.8 * 2.0 + 0.2 * 1.0)
    share.observe(0.0, 1.0)  # nothing to divide by: ignored
    assert share.seconds(1.0) == pytest.approx(1.8)


def test_the_service_refuses_a_request_too_big_for_its_deadline_before_running_it(
    text_classification_model: TinyModel,
) -> None:
    settings = Settings(  # type: ignore[call-arg]
        models=[f"sst={text_classification_model.bundle}"], intra_op_threads=1, model_workers=1, timeout_s=30.0
    )

    async def main() -> None:
        async with serving(settings) as (app, client):
            engine = app.state.registry.engines["sst"]
            assert engine.batcher.seconds_per_token is not None, "warm-up measures the model's rate"
            runner, gate = gate_engine(engine)
            gate.set()
            # a model this slow, even at its best, cannot do 22 tokens in 12 s
            engine.batcher.rate.average = engine.batcher.rate.best = 1.0
            response = await client.post("/v1/text-classification", json={"inputs": "monday tuesday " * 10})
            assert_error(response, 413, "payload_too_large", "fewer or shorter inputs")
            assert engine.context.tokenizer.token_to_id("monday") not in runner.seen_ids()
            metrics = (await client.get("/metrics")).text
            labels = 'model="sst",reason="too_big",task="text-classification"'
            assert f"bertserve_shed_requests_total{{{labels}}} 1.0" in metrics

    asyncio.run(main())
