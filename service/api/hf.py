"""Hugging Face Inference API routes: what ``huggingface_hub.InferenceClient(model=URL)`` posts (and LangChain's
``HuggingFaceEndpoint`` classes, which wrap it), for every task served.

``POST /models/{name}`` takes ``{"inputs", "parameters", "options"}`` as the HF Inference API does; the named model's
task decides what ``inputs`` and ``parameters`` are (the v1 route's fields, which are the pipelines' names) and
the answer is the pipeline's for that input: one text's labels, entities or fill-mask candidates as a list, one
question's answer as an object (a list with ``top_k`` > 1), a zero-shot ``{"sequence", "labels", "scores"}``; a list
of inputs answers a list of those. Feature extraction takes its options at the top level, as TEI and the client
send them, and answers one vector per text; ``{"inputs": {"source_sentence", "sentences"}}`` on an embeddings
model is sentence similarity: the cosine of the source with each sentence. ``POST /`` answers the same way with
the one model served (as TEI and Inference Endpoints serve one), or the ``--default-model``. ``options``
(``wait_for_model``, ``use_cache``) are accepted and have nothing to change here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError

from service.api.entry import invalid_value, is_json_media_type, parse_json
from service.api.protocol import Decoded, Incoming, InferenceRoute, Protocol, Reply, json_reply
from service.core import InferenceResult, ModelRegistry
from service.engine import Engine
from service.errors import BadRequest, InvalidRequest, UnsupportedMediaType
from service.schemas import (
    FillMaskRequest,
    QuestionAnsweringRequest,
    TeiEmbedRequest,
    TextClassificationRequest,
    TokenClassificationRequest,
    ZeroShotClassificationRequest,
)
from service.schemas.common import TaskRequest
from service.schemas.sentence_similarity import ParameterizedSimilarityRequest
from service.schemas.v2 import inline_json_schema

EMBEDDINGS = "feature-extraction"
TASK_REQUESTS: dict[str, type[TaskRequest]] = {
    "text-classification": TextClassificationRequest,
    "token-classification": TokenClassificationRequest,
    "question-answering": QuestionAnsweringRequest,
    "fill-mask": FillMaskRequest,
    "zero-shot-classification": ZeroShotClassificationRequest,
    EMBEDDINGS: TeiEmbedRequest,
}


class HfInferenceRequest(BaseModel):
    """The HF Inference API body (the OpenAPI document's; the model's task decides the inputs and parameters)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {"inputs": "I loved this movie!"},
                {"inputs": "Paris is the [MASK] of France.", "parameters": {"top_k": 3}},
                {"inputs": {"question": "Where does John live?", "context": "John lives in Paris."}},
                {"inputs": {"source_sentence": "A man eats.", "sentences": ["Someone eats food.", "A dog runs."]}},
            ]
        },
    )

    inputs: Any = Field(description="Texts, a question and context, or source_sentence and sentences.")
    parameters: dict[str, Any] | None = Field(None, description="The pipeline's parameters for the model's task.")
    options: dict[str, Any] | None = Field(None, description="wait_for_model, use_cache: accepted, nothing to change.")


class HfInferenceResponse(RootModel[list[Any] | dict[str, Any]]):
    """The pipeline's answer for the model's task (see the route's description)."""


@dataclass(frozen=True, slots=True)
class HfCall:
    task: str
    single: bool  # one input (not a list): the answer is that input's, not a list of one
    similarity: bool = False


def select_engine(incoming: Incoming, registry: ModelRegistry) -> Engine:
    return registry.select(None, incoming.path_params.get("name"), unnamed="post to /models/NAME")


def task_fields(body: dict[str, Any], task: str) -> tuple[dict[str, Any], bool]:
    """The v1 request's fields from an HF body, and whether it is sentence similarity."""
    parameters = body.get("parameters") or {}
    inputs = body.get("inputs")
    extra = {key: value for key, value in body.items() if key not in ("inputs", "parameters", "options")}
    if task == EMBEDDINGS:
        if isinstance(inputs, dict) and "source_sentence" in inputs:
            return {"inputs": inputs, "parameters": body.get("parameters"), **extra}, True
        return {"inputs": inputs, **parameters, **extra}, False
    if extra:
        raise InvalidRequest(f"unknown fields {sorted(extra)}: the task's options go in parameters")
    return {"inputs": inputs, **parameters}, False


def decode_hf(incoming: Incoming, registry: ModelRegistry) -> Decoded:
    if not (incoming.content_type and is_json_media_type(incoming.content_type)):
        raise UnsupportedMediaType("the body must be JSON: send 'Content-Type: application/json'")
    body = parse_json(incoming.body)
    if not isinstance(body, dict) or "inputs" not in body:
        raise BadRequest('the body must be a JSON object with "inputs"')
    try:
        HfInferenceRequest.model_validate(body)
    except ValidationError as exc:
        raise invalid_value(exc, incoming.content_type) from None
    engine = select_engine(incoming, registry)
    model = TASK_REQUESTS.get(engine.task)
    if model is None:
        raise BadRequest(f"model {engine.name!r} serves {engine.task}, which the HF Inference API routes do not speak")
    fields, similarity = task_fields(body, engine.task)
    if similarity:
        model = ParameterizedSimilarityRequest
    try:
        request = model.model_validate({**fields, "model": engine.name})
    except ValidationError as exc:
        raise invalid_value(exc, incoming.content_type) from None
    single = not isinstance(body["inputs"], list) or similarity
    return Decoded(request, engine, HfCall(engine.task, single, similarity))


def one_answer(task: str, request: TaskRequest, result: Any) -> Any:
    """One input's answer in the pipeline's shape."""
    if task == "question-answering" and getattr(request, "top_k", 1) == 1:
        return result[0]
    if task == "fill-mask" and len(result) == 1:
        return result[0]  # one mask: its candidates, not a list of one
    return result


def hf_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    call: HfCall = decoded.context
    if call.task == EMBEDDINGS:
        if call.similarity:
            assert isinstance(decoded.request, ParameterizedSimilarityRequest)
            return json_reply(decoded.request.similarities(result.results)[0])
        return json_reply([item.vector for item in result.results])
    answers = [one_answer(call.task, decoded.request, item) for item in result.results]
    if call.task == "text-classification":
        return json_reply(answers)  # a list per input also for one text: what the client reads
    return json_reply(answers[0] if call.single else answers)


HF_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": inline_json_schema(HfInferenceRequest)}},
    }
}
DESCRIPTION = (
    "The Hugging Face Inference API (huggingface_hub.InferenceClient(model=URL)): the model's task decides the inputs, "
    "parameters and answer, as its transformers pipeline's; feature extraction and sentence similarity on an "
    "embeddings model."
)

PROTOCOL = Protocol(
    "hf",
    (
        InferenceRoute(
            "/models/{name}", "hf_inference", DESCRIPTION, "hf-inference", HfInferenceResponse, hf_answer,
            decode=decode_hf, openapi_extra=HF_BODY,
        ),
        InferenceRoute(
            "/", "hf_inference_default", DESCRIPTION + " The one model served answers.", "hf-inference",
            HfInferenceResponse, hf_answer, decode=decode_hf, openapi_extra=HF_BODY,
        ),
    ),
)  # fmt: skip
