"""The v1 task routes answering ``{"model", "results"}``.

Each validates its body and hands it to ``service.inference``, the shared path.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Request, Response

from service.api.deps import RegistryDep, SettingsDep
from service.api.http import TASK_ERROR_RESPONSES, client_gone, json_response
from service.inference import InferenceRequest, InferenceResult, run_inference
from service.registry import ModelRegistry
from service.schemas import (
    FillMaskRequest,
    FillMaskResponse,
    QuestionAnsweringRequest,
    QuestionAnsweringResponse,
    TextClassificationRequest,
    TextClassificationResponse,
    TokenClassificationRequest,
    TokenClassificationResponse,
    ZeroShotClassificationRequest,
    ZeroShotClassificationResponse,
)
from service.schemas.common import TaskRequest
from service.settings import Settings

text_classification_router = APIRouter(tags=["text-classification"])
question_answering_router = APIRouter(tags=["question-answering"])
token_classification_router = APIRouter(tags=["token-classification"])
fill_mask_router = APIRouter(tags=["fill-mask"])
zero_shot_classification_router = APIRouter(tags=["zero-shot-classification"])


async def run_task(request: Request, body: TaskRequest, registry: ModelRegistry, settings: Settings) -> Response:
    """A v1 body -> ``run_inference`` (cancelled if the client goes away) -> ``{"model", "results"}``."""
    result = await run_inference(as_inference(body), registry, settings, functools.partial(client_gone, request))
    return json_response(task_answer(result))


def as_inference(body: TaskRequest) -> InferenceRequest:
    inputs, params = body.to_task()
    return InferenceRequest(task=body.task, inputs=inputs, params=params, model=body.model)


def task_answer(result: InferenceResult) -> dict[str, Any]:
    return {"model": result.model, "results": result.results}


@text_classification_router.post(
    "/v1/text-classification", response_model=TextClassificationResponse, responses=TASK_ERROR_RESPONSES
)
async def text_classification(
    body: TextClassificationRequest, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Label texts or text pairs (transformers' text-classification pipeline semantics)."""
    return await run_task(request, body, registry, settings)


@question_answering_router.post(
    "/v1/question-answering", response_model=QuestionAnsweringResponse, responses=TASK_ERROR_RESPONSES
)
async def question_answering(
    body: QuestionAnsweringRequest, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Extract answer spans from contexts (transformers' question-answering pipeline semantics)."""
    return await run_task(request, body, registry, settings)


@token_classification_router.post(
    "/v1/token-classification", response_model=TokenClassificationResponse, responses=TASK_ERROR_RESPONSES
)
async def token_classification(
    body: TokenClassificationRequest, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Find entities in texts (transformers' token-classification pipeline semantics)."""
    return await run_task(request, body, registry, settings)


@fill_mask_router.post("/v1/fill-mask", response_model=FillMaskResponse, responses=TASK_ERROR_RESPONSES)
async def fill_mask(body: FillMaskRequest, request: Request, registry: RegistryDep, settings: SettingsDep) -> Response:
    """Predict the tokens behind mask tokens (transformers' fill-mask pipeline semantics)."""
    return await run_task(request, body, registry, settings)


@zero_shot_classification_router.post(
    "/v1/zero-shot-classification", response_model=ZeroShotClassificationResponse, responses=TASK_ERROR_RESPONSES
)
async def zero_shot_classification(
    body: ZeroShotClassificationRequest, request: Request, registry: RegistryDep, settings: SettingsDep
) -> Response:
    """Score texts against labels chosen per request with an NLI model (transformers' zero-shot pipeline)."""
    return await run_task(request, body, registry, settings)


# The routes service.api.fast_path answers directly (path -> request model), each the same as its route above.
FAST_PATH_MODELS: dict[str, type[TaskRequest]] = {
    "/v1/text-classification": TextClassificationRequest,
    "/v1/question-answering": QuestionAnsweringRequest,
    "/v1/token-classification": TokenClassificationRequest,
    "/v1/fill-mask": FillMaskRequest,
    "/v1/zero-shot-classification": ZeroShotClassificationRequest,
}
