"""429 / 504 / 503 / client disconnects, with the model held on a gate so queues fill up on purpose."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from service.engine import Engine
from service.settings import Settings
from tests.service.apptools import GatedRunner, gate_engine, serving, wait_for
from tests.service.test_api import assert_error
from tests.service.tiny_models import TinyModel

ROUTE = "/v1/text-classification"


def settings_for(model: TinyModel, **overrides: object) -> Settings:
    return Settings(  # type: ignore[arg-type]
        models=[f"sst={model.bundle}"],
        intra_op_threads=1,
        model_workers=1,
        max_wait_ms=0.0,
        max_batch_size=1,
        **overrides,
    )


async def hold_first_request(
    client: httpx.AsyncClient, engine: Engine
) -> tuple[GatedRunner, threading.Event, asyncio.Future[httpx.Response]]:
    """Gate ``engine``'s model and post a first request to ROUTE; returns once the model holds it."""
    runner, gate = gate_engine(engine)
    held = asyncio.ensure_future(client.post(ROUTE, json={"inputs": "first"}))
    await wait_for(runner.entered.is_set)
    return runner, gate, held


def test_full_queue_answers_429_with_retry_after(text_classification_model: TinyModel) -> None:
    async def main() -> None:
        async with serving(settings_for(text_classification_model, max_queue=2)) as (app, client):
            engine = app.state.registry.engines["sst"]
            _, gate, running = await hold_first_request(client, engine)
            queued = [asyncio.ensure_future(client.post(ROUTE, json={"inputs": text})) for text in ("two", "three")]
            await wait_for(lambda: engine.batcher.queue_depth == 2)
            refused = await client.post(ROUTE, json={"inputs": "four"})
            assert_error(refused, 429, "overloaded", "queued")
            assert int(refused.headers["retry-after"]) >= 1
            gate.set()
            assert [response.status_code for response in await asyncio.gather(running, *queued)] == [200, 200, 200]
            metrics = (await client.get("/metrics")).text
            assert f'bertserve_requests_total{{route="{ROUTE}",status="429"}} 1.0' in metrics

    asyncio.run(main())


def test_slow_model_answers_504_and_drops_the_rows(text_classification_model: TinyModel) -> None:
    async def main() -> None:
        async with serving(settings_for(text_classification_model, timeout_s=0.2)) as (app, client):
            engine = app.state.registry.engines["sst"]
            runner, gate, blocker = await hold_first_request(client, engine)
            assert_error(await client.post(ROUTE, json={"inputs": "monday tuesday"}), 504, "timeout", "0.2")
            gate.set()
            assert (await blocker).status_code == 504  # it waited on the gate past its own deadline too
            assert (await client.post(ROUTE, json={"inputs": "later"})).status_code == 200
            monday = engine.context.tokenizer.token_to_id("monday")
            assert monday not in runner.seen_ids()

    asyncio.run(main())


def test_not_ready_until_warmed_up_and_while_shutting_down(text_classification_model: TinyModel) -> None:
    settings = settings_for(text_classification_model)
    engine = Engine.from_bundle(text_classification_model.bundle, settings, name="sst")
    runner, gate = gate_engine(engine)

    async def main() -> None:
        async with serving(settings, engines={"sst": engine}, ready=False) as (app, client):
            await wait_for(runner.entered.is_set)  # the warm-up batch is held
            assert_error(await client.get("/health/ready"), 503, "not_ready", "sst")
            assert (await client.get("/health/live")).status_code == 200
            in_flight = asyncio.ensure_future(client.post(ROUTE, json={"inputs": "queued during warm-up"}))
            gate.set()
            await wait_for(lambda: app.state.registry.ready)
            assert (await client.get("/health/ready")).status_code == 200
            assert (await in_flight).status_code == 200

            gate.clear()
            runner.entered.clear()
            draining = asyncio.ensure_future(client.post(ROUTE, json={"inputs": "in flight at shutdown"}))
            await wait_for(runner.entered.is_set)
            stopping = asyncio.ensure_future(app.state.registry.stop_all(drain=True))
            await wait_for(lambda: app.state.registry.shutting_down)
            assert_error(await client.get("/health/ready"), 503, "not_ready", "shutting down")
            assert_error(await client.post(ROUTE, json={"inputs": "too late"}), 503, "not_ready")
            gate.set()
            assert (await draining).status_code == 200
            await stopping

    asyncio.run(main())


V2_TEXT = {"inputs": [{"name": "text", "shape": [1], "datatype": "BYTES", "data": ["monday tuesday"]}]}


@pytest.mark.parametrize(
    ("path", "payload"), [(ROUTE, {"inputs": "monday tuesday"}), ("/v2/models/sst/infer", V2_TEXT)], ids=["v1", "v2"]
)
def test_client_disconnect_cancels_the_request_before_it_reaches_the_model(
    text_classification_model: TinyModel, path: str, payload: dict
) -> None:
    async def main() -> None:
        async with serving(settings_for(text_classification_model)) as (app, client):
            engine = app.state.registry.engines["sst"]
            runner, gate, blocker = await hold_first_request(client, engine)

            body = json.dumps(payload).encode()
            gone = asyncio.Event()
            calls = 0
            sent: list[dict] = []

            async def receive() -> dict:
                nonlocal calls
                calls += 1
                if calls == 1:
                    return {"type": "http.request", "body": body, "more_body": False}
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(message: dict) -> None:
                sent.append(message)

            scope = {
                "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
                "client": ("127.0.0.1", 5000), "server": ("test", 80),
            }  # fmt: skip
            call = asyncio.ensure_future(app(scope, receive, send))
            await wait_for(lambda: engine.batcher.queue_depth == 1)
            gone.set()
            await call
            gate.set()
            assert (await blocker).status_code == 200
            assert (await client.post(ROUTE, json={"inputs": "after"})).status_code == 200
            assert sent[0]["status"] == 499
            assert engine.context.tokenizer.token_to_id("monday") not in runner.seen_ids()
            assert engine.batcher.dropped_rows == 1

    asyncio.run(main())
