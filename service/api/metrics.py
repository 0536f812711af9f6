from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.deps import MetricsDep
from service.metrics import labelled_by_process
from service.processes import get, on_private_socket

router = APIRouter(tags=["metrics"])
logger = logging.getLogger(__name__)


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
async def metrics(request: Request, service_metrics: MetricsDep) -> Response:
    """Prometheus text format: requests, queue time, batch size and tokens, padding, inference time. With several
    serving processes, every process's series, each labelled with its ``process``."""
    own = generate_latest(service_metrics.registry)
    siblings = request.app.state.core.siblings
    if siblings is None or on_private_socket(request.scope):  # one process, or a sibling asking for its own
        return Response(own, media_type=CONTENT_TYPE_LATEST)

    others = siblings.others()
    answers = await asyncio.gather(
        *(asyncio.to_thread(get, siblings.socket_path(index), "/metrics") for index in others),
        return_exceptions=True,
    )
    expositions = {siblings.index: own}
    for index, answer in zip(others, answers, strict=True):
        if isinstance(answer, (FileNotFoundError, ConnectionRefusedError)):  # not started yet, or being replaced
            logger.debug("metrics of process %d left out: %s", index, answer)
        elif isinstance(answer, OSError):
            logger.warning("metrics of process %d left out: %s", index, answer)
        elif isinstance(answer, BaseException):
            raise answer
        else:
            expositions[index] = answer
    return Response(labelled_by_process(expositions, siblings.count), media_type=CONTENT_TYPE_LATEST)
