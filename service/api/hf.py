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

from service.api.bodies import invalid_value, is_json_media_type, parse_json
from service.api.entry import Decoded, Incoming, InferenceRoute, Protocol, Reply, json_reply
from service.core import InferenceResult, ModelRegistry
from service.engine import Engine
from service.errors import BadRequest, InvalidRequest, UnsupportedMediaType
from service.schemas.common import TaskRequest
from service.schemas.v2 import inline_json_schema
from service.tasks import HF_MAPPINGS
from service.tasks.base import HfMapping


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
    mapping: HfMapping
    single: bool  # one input (not a list): the answer is that input's, not a list of one


def select_engine(incoming: Incoming, registry: ModelRegistry) -> Engine:
    return registry.select(None, incoming.path_params.get("name"), unnamed="post to /models/NAME")


def task_fields(body: dict[str, Any], mapping: HfMapping) -> tuple[type[TaskRequest], dict[str, Any], bool]:
    """The task's request model, its fields from an HF body, and whether the body is one input."""
    if mapping.read is not None:
        return mapping.read(body)
    extra = {key: value for key, value in body.items() if key not in ("inputs", "parameters", "options")}
    if extra:
        raise InvalidRequest(f"unknown fields {sorted(extra)}: the task's options go in parameters")
    inputs = body.get("inputs")
    return mapping.request, {"inputs": inputs, **(body.get("parameters") or {})}, not isinstance(inputs, list)


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
    mappings = HF_MAPPINGS.get(engine.task, [])
    mapping = next((found for found in mappings if found.accepts is None or found.accepts(body)), None)
    if mapping is None:
        raise BadRequest(f"model {engine.name!r} serves {engine.task}, which the HF Inference API routes do not speak")
    model, fields, single = task_fields(body, mapping)
    try:
        request = model.model_validate({**fields, "model": engine.name})
    except ValidationError as exc:
        raise invalid_value(exc, incoming.content_type) from None
    return Decoded(request, engine, HfCall(mapping, single))


def hf_answer(decoded: Decoded, result: InferenceResult) -> Reply:
    call: HfCall = decoded.context
    return json_reply(call.mapping.answer(decoded.request, result.results, call.single))


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
