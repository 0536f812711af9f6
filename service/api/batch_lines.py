"""A batch line sent through its route, as the inference entry sends an online request: the body's size limit
(``max_body_bytes``), the route's request model (``validated_json_body``: the JSON rules and FastAPI's words),
``run_inference`` and the route's ``answer``; errors in the route's error shape. A line's answer is the answer the
online route gives for the same body.

The endpoints a batch may name: ``/v1/embeddings`` and every other ``/v1/...`` inference route with a JSON body
(Cohere's ``/v1/embed`` and ``/v1/classify`` too: embed jobs run their rows through ``/v1/embed``).

With several serving processes a batch's lines are spread over all of them (``SpreadCall``, ``LINE_PATH``).
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import orjson
from fastapi import APIRouter, Request, Response

from service.api import cohere, openai, rerank, v1
from service.api.bodies import JSON_MEDIA_TYPE, encode_json, validated_json_body
from service.api.entry import Decoded, Incoming, InferenceRoute, Reply, body_too_large
from service.batch.lines import EncodedJson
from service.batch.runner import Answer, TryLater
from service.core import InferenceRequest, ServiceCore, run_inference
from service.errors import NotFound, NotReady, Overloaded, RequestTimeout, ServiceError
from service.processes import Siblings, on_private_socket

logger = logging.getLogger(__name__)

BATCH_ROUTES: dict[str, InferenceRoute] = {
    route.path: route
    for protocol in (v1.PROTOCOL, openai.PROTOCOL, rerank.PROTOCOL, cohere.PROTOCOL)
    for route in protocol.routes
    if route.path.startswith("/v1/") and route.body is not None
}
TRANSIENT = (Overloaded, NotReady, RequestTimeout)  # refusals a line waits out and tries again


class RouteCall:
    """``(url, body) -> Answer`` over ``core``'s models (``service.batch.runner.LineCall``)."""

    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    async def __call__(self, url: str, body: Any) -> Answer:
        route = BATCH_ROUTES[url]
        assert route.body is not None
        try:
            content = encode_json(body)
            if len(content) > self.core.settings.max_body_bytes:
                raise body_too_large(self.core.settings.max_body_bytes)
            if route.decode is not None:  # the route reads its body itself (Cohere embed: the model's int8 ranges)
                decoded = route.decode(Incoming(content, JSON_MEDIA_TYPE, [], {}), self.core.registry)
            else:
                decoded = Decoded(validated_json_body(route.body, content, JSON_MEDIA_TYPE))
            request = InferenceRequest.of(decoded.request, background=True)
            result = await run_inference(request, self.core.registry, self.core.settings, engine=decoded.engine)
            reply = route.answer(decoded, result)
            return Answer(200, EncodedJson(reply.content if isinstance(reply, Reply) else encode_json(reply)))
        except TRANSIENT as refused:
            delay = float(refused.retry_after_s) if isinstance(refused, Overloaded) else 1.0
            raise TryLater(delay, Answer(refused.status_code, refused.body(url))) from None
        except ServiceError as error:
            return Answer(error.status_code, error.body(url))
        except Exception as exc:  # a bug: answered as the online route's unexpected-error handler answers it
            logger.error("unhandled error on a batch line to %s", url, exc_info=exc)
            failure = ServiceError(f"internal error: {type(exc).__name__}")
            return Answer(failure.status_code, failure.body(url))


# Several serving processes (service.processes): the runner that holds the data folder's lead hands lines in turn to
# itself and to each other process, over its private socket, where LINE_PATH runs them as RouteCall runs them here
# (each process's background queue, behind its own online work). The line's url travels in a header, so its body
# meets the same max_body_bytes as a line run here.
LINE_PATH = "/internal/batch-line"
LINE_URL, LINE_STATUS, LINE_RETRY = "x-bertserve-line-url", "x-bertserve-line-status", "x-bertserve-line-retry-after"
SIBLING_RETRY_S = 0.5  # a process that could not be reached (replaced, restarting): try the line again after this

router = APIRouter(include_in_schema=False)


@router.post(LINE_PATH)
async def answer_line(request: Request) -> Response:
    """A line another process's batch runner hands this one: on the private socket only (a 404 on the port)."""
    url = request.headers.get(LINE_URL, "")
    if not on_private_socket(request.scope) or url not in BATCH_ROUTES:
        raise NotFound(f"no route {request.url.path}")
    try:
        answer = await RouteCall(request.app.state.core)(url, orjson.loads(await request.body()))
        headers = {LINE_STATUS: str(answer.status_code)}
    except TryLater as refused:
        answer = refused.answer
        headers = {LINE_STATUS: str(answer.status_code), LINE_RETRY: str(refused.retry_after_s)}
    content = answer.body.content if isinstance(answer.body, EncodedJson) else encode_json(answer.body)
    return Response(content, media_type=JSON_MEDIA_TYPE, headers=headers)


class SpreadCall:
    """``(url, body) -> Answer`` taken in turn by this process (``local``) and each other serving process (over its
    private socket, ``LINE_PATH``); a line refused for a while is tried again at the next one in turn."""

    def __init__(self, local: RouteCall, siblings: Siblings) -> None:
        import httpx  # only with several processes and a data folder

        self.local = local
        self.clients = [
            httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=str(siblings.socket_path(index))),
                base_url="http://process",
                timeout=None,  # a background line waits behind that process's online work for as long as it lasts
            )
            for index in siblings.others()
        ]
        self._turns = itertools.cycle([None, *self.clients])
        self._unreachable = (httpx.TransportError,)

    async def __call__(self, url: str, body: Any) -> Answer:
        client = next(self._turns)
        if client is None:
            return await self.local(url, body)
        try:
            response = await client.post(LINE_PATH, content=encode_json(body), headers={LINE_URL: url})
        except self._unreachable as exc:
            refusal = NotReady(f"the serving process that took this line could not be reached ({type(exc).__name__})")
            raise TryLater(SIBLING_RETRY_S, Answer(refusal.status_code, refusal.body(url))) from None
        answer = Answer(int(response.headers.get(LINE_STATUS, response.status_code)), EncodedJson(response.content))
        if LINE_STATUS not in response.headers or LINE_RETRY in response.headers:  # refused before or by the route
            raise TryLater(float(response.headers.get(LINE_RETRY, SIBLING_RETRY_S)), answer)
        return answer

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()
