"""Workers that come back: a dead worker is replaced on a fresh session, readiness follows, failures back off."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.engine import Engine
from service.errors import NotReady
from service.sessions import ModelRunner
from service.settings import Settings
from service.supervision import FIRST_BACKOFF_S, MAX_BACKOFF_S
from service.tasks import ClassificationParams
from tests.service.apptools import DeadlyRunner, GatedRunner, serving, wait_for
from tests.service.test_api import assert_error
from tests.service.tiny_models import CLASSIFICATION_LABELS, TinyModel

PARAMS = ClassificationParams()


def engine_for(model: TinyModel, workers: int) -> Engine:
    settings = Settings(intra_op_threads=1, model_workers=workers, max_batch_size=1, max_wait_ms=0.0)
    return Engine.from_bundle(model.bundle, settings, name="sst")


def gated_factory(engine: Engine) -> tuple[threading.Event, list[ModelRunner]]:
    """Replacement sessions wait for the returned event; the list collects the ones built."""
    build, release, built = engine.pool.make_runner, threading.Event(), []
    assert build is not None

    def make() -> ModelRunner:
        release.wait(10)
        runner = build()
        built.append(runner)
        return runner

    engine.pool.make_runner = make
    return release, built


def test_a_dead_worker_is_replaced_on_a_fresh_session_and_readiness_follows(
    text_classification_model: TinyModel,
) -> None:
    engine = engine_for(text_classification_model, workers=1)
    old_session = engine.pool.runner

    async def main() -> None:
        await engine.start()
        release, built = gated_factory(engine)
        engine.workers[0].runner = DeadlyRunner()
        with pytest.raises(NotReady, match="model sst lost a worker"):
            await engine.infer(["the dying batch"], PARAMS)
        await wait_for(lambda: engine.pool.live == 0)
        assert not engine.ready
        with pytest.raises(NotReady, match="model sst has no live worker"):
            await engine.infer(["while it is replaced"], PARAMS)
        release.set()
        await wait_for(lambda: engine.ready)
        assert engine.pool.restarts == 1 and engine.pool.runner is built[0] is not old_session
        answer = await engine.infer(["a wonderful movie"], PARAMS)
        assert answer[0][0]["label"] in CLASSIFICATION_LABELS
        await engine.stop()

    asyncio.run(main())


def test_one_dead_worker_leaves_the_model_serving_and_both_workers_get_the_fresh_session(
    text_classification_model: TinyModel,
) -> None:
    engine = engine_for(text_classification_model, workers=2)

    async def main() -> None:
        await engine.start()
        first, second = engine.workers
        gate = threading.Event()
        held = GatedRunner(first.runner, gate)
        first.runner, second.runner = held, DeadlyRunner()
        await wait_for(lambda: engine.batcher.idle_workers == 2)
        served = asyncio.ensure_future(engine.infer(["held by the first worker"], PARAMS))
        await wait_for(held.entered.is_set)
        with pytest.raises(NotReady, match="model sst lost a worker"):
            await engine.infer(["the second worker dies on it"], PARAMS)
        assert engine.ready, "the other worker still serves"
        gate.set()
        assert (await served)[0][0]["label"] in CLASSIFICATION_LABELS
        await wait_for(lambda: engine.pool.restarts == 1 and engine.pool.live == 2)
        first, second = engine.workers
        assert first.runner is second.runner is engine.pool.runner
        texts = ["good", "bad", "fine", "awful"] * 4
        answers = await asyncio.gather(*(engine.infer([text], PARAMS) for text in texts))
        assert all(answer[0][0]["label"] in CLASSIFICATION_LABELS for answer in answers)
        await engine.stop()

    asyncio.run(main())


def test_repeated_deaths_back_off_and_a_healthy_spell_resets_it(text_classification_model: TinyModel) -> None:
    engine = engine_for(text_classification_model, workers=1)
    pool = engine.pool
    pool.make_runner = DeadlyRunner  # every replacement dies at its first batch

    async def main() -> None:
        await engine.start()
        delays = []
        engine.workers[0].runner = DeadlyRunner()
        for restarts in range(1, 4):
            with pytest.raises(NotReady):
                await engine.infer(["dies"], PARAMS)
            await wait_for(lambda restarts=restarts: pool.restarts == restarts, timeout=10)  # type: ignore[misc]
            delays.append(pool.backoff_s())
        assert delays == [0.0, FIRST_BACKOFF_S, 2 * FIRST_BACKOFF_S]
        pool._deaths_in_a_row = 40
        assert pool.backoff_s() == MAX_BACKOFF_S
        await engine.stop()

    asyncio.run(main())


def test_the_service_reports_a_dead_worker_and_recovers(text_classification_model: TinyModel) -> None:
    settings = Settings(models=[f"sst={text_classification_model.bundle}"], intra_op_threads=1, model_workers=1)

    async def main() -> None:
        async with serving(settings) as (app, client):
            engine = app.state.registry.engines["sst"]
            release, _ = gated_factory(engine)
            engine.workers[0].runner = DeadlyRunner()
            route = "/v1/text-classification"
            assert_error(await client.post(route, json={"inputs": "x"}), 503, "not_ready", "model sst lost a worker")
            await wait_for(lambda: engine.pool.live == 0)
            assert_error(await client.get("/health/ready"), 503, "not_ready", "sst")
            assert (await client.get("/v2/models/sst/ready")).status_code == 503
            assert_error(await client.post(route, json={"inputs": "y"}), 503, "not_ready", "no live worker")
            release.set()
            await wait_for(lambda: engine.ready)
            assert (await client.get("/health/ready")).status_code == 200
            assert (await client.post(route, json={"inputs": "a wonderful movie"})).status_code == 200
            metrics = (await client.get("/metrics")).text
            assert 'bertserve_worker_restarts_total{model="sst",task="text-classification"} 1.0' in metrics
            assert 'bertserve_workers_alive{model="sst",task="text-classification"} 1.0' in metrics

    asyncio.run(main())
