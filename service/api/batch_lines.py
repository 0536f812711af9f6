"""A batch line sent through its route, as the inference entry sends an online request: the body's size limit
(``max_body_bytes``), the route's request model (``validated_json_body``: the JSON rules and FastAPI's words),
``run_inference`` and the route's ``answer``; errors in the route's error shape. A line's answer is the answer the
online route gives for the same body.

The endpoints a batch may name: ``/v1/embeddings`` and every other ``/v1/...`` inference route with a JSON body
(Cohere's ``/v1/embed`` and ``/v1/classify`` too: embed jobs run their rows through ``/v1/embed``).
"""

from __future__ import annotations

import logging
from typing import Any

from service.api import cohere, openai, rerank, v1
from service.api.bodies import JSON_MEDIA_TYPE, encode_json, validated_json_body
from service.api.entry import Decoded, Incoming, InferenceRoute, Reply, body_too_large
from service.batch.lines import EncodedJson
from service.batch.runner import Answer, TryLater
from service.core import InferenceRequest, ServiceCore, run_inference
from service.errors import NotReady, Overloaded, RequestTimeout, ServiceError

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
