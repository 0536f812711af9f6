"""Triton's ``ModelStreamInfer``: infer requests on one bidirectional stream (tritonclient.grpc's ``start_stream`` /
``async_stream_infer``, perf_analyzer ``--streaming``), each answered on the stream when it is done, as
``ModelInfer`` answers it alone: the same limits, permits, deadline (the stream's) and answers.

The requests of a stream run side by side, so a client that keeps several in flight on one stream gets them batched
as it would with as many calls. A request's error is a response carrying ``error_message`` (and the request's model
and id) and the stream goes on, as Triton does; the API key is checked once, from the stream's metadata. Each
request is counted in the request metrics and written in the access line under the stream's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from service.core import ServiceCore, key_authorised
from service.errors import ServiceError
from service.grpc.protocol import MESSAGES, SERVER_ERRORS, SERVICE, trace_carrier
from service.metrics import log_access
from service.tracing import ACCESS_RECORD, RequestRecord

logger = logging.getLogger(__name__)
Infer = Callable[[Any, Any], Awaitable[Any]]  # (request, context) -> ModelInferResponse (ModelInfer)


class StreamAnswers:
    """One stream's requests, each answered by ``infer`` in a task of its own, its response queued as it is done."""

    def __init__(self, core: ServiceCore, infer: Infer, path: str, carrier: dict[str, str]) -> None:
        self.core, self.infer, self.path = core, infer, path
        self.carrier = carrier  # the stream's trace context: each request's span continues it
        self.done: asyncio.Queue[Any] = asyncio.Queue()
        self.running: set[asyncio.Task[None]] = set()
        # Requests read and not yet answered on the wire: a client that sends without reading stops being read
        # once it has as many as the server takes in flight, instead of piling answers up here.
        self.room = asyncio.Semaphore(core.settings.max_concurrent_requests)

    async def read(self, requests: AsyncIterator[Any], context: Any) -> None:
        """Start a task per request until the client closes its side, wait for them, then mark the end (None), which
        also comes when reading fails or is cancelled."""
        try:
            async for request in requests:
                await self.room.acquire()
                task = asyncio.create_task(self.answer(request, context))
                self.running.add(task)
                task.add_done_callback(self.running.discard)
            while self.running:
                await asyncio.gather(*self.running)
        finally:
            self.done.put_nowait(None)

    async def answer(self, request: Any, context: Any) -> None:
        access_log, tracing = self.core.settings.access_log, self.core.tracing
        span = None
        if tracing is None:
            record = RequestRecord() if access_log else None
        else:
            attributes = {"rpc.system": "grpc", "rpc.service": SERVICE, "rpc.method": self.path.rpartition("/")[2]}
            span = tracing.begin(self.path.removeprefix("/"), self.carrier, attributes, request.model_name or None)
            record = tracing.record_for(span, access_log)
        ACCESS_RECORD.set(record)  # this task's own context
        started, code = time.perf_counter(), grpc.StatusCode.OK
        response = MESSAGES["ModelStreamInferResponse"]()
        try:
            response.infer_response.CopyFrom(await self.infer(request, context))
        except ServiceError as error:
            code = grpc.StatusCode[error.grpc_code]
            response.error_message = error.message
        except Exception as exc:
            code = grpc.StatusCode.INTERNAL
            logger.error("unhandled error on %s", self.path, exc_info=exc)
            response.error_message = f"internal error: {type(exc).__name__}"
        if code != grpc.StatusCode.OK:
            failed = response.infer_response
            failed.model_name, failed.model_version, failed.id = request.model_name, request.model_version, request.id
        elapsed = time.perf_counter() - started
        metrics = self.core.metrics
        metrics.requests.labels(self.path, code.name).inc()
        metrics.request_seconds.labels(self.path).observe(elapsed)
        if span is not None and tracing is not None:
            tracing.end(span, record, {"rpc.grpc.status_code": code.value[0]}, error=code in SERVER_ERRORS)
        if record is not None and access_log:
            log_access("GRPC", self.path, code.name, elapsed, record)
        await self.done.put(response)


def stream_handler(core: ServiceCore, name: str, infer: Infer) -> Callable[[Any, Any], AsyncIterator[Any]]:
    """The stream's behaviour: the API key first, then each request's response as it comes."""
    path = f"/{SERVICE}/{name}"
    keys = [key.encode() for key in core.settings.api_keys]

    async def handle(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if keys:
            authorization = dict(context.invocation_metadata() or ()).get("authorization", "")
            if not key_authorised(str(authorization).encode(), keys):
                await context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "missing or wrong API key: send 'authorization: Bearer KEY' metadata",
                )
        answers = StreamAnswers(core, infer, path, trace_carrier(context) if core.tracing is not None else {})
        reader = asyncio.create_task(answers.read(requests, context))
        try:
            while (response := await answers.done.get()) is not None:
                yield response
                answers.room.release()
            await reader
        finally:
            for task in (reader, *answers.running):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    return handle
