"""Models shared by every route: errors, the model list, health, the task request base."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from contract.bundle import PRECISIONS, QUANTIZATIONS
from contract.tasks import TASK_NAMES
from service.errors import ERROR_TYPES

# Bounds that cannot change an answer (no bundle is longer than 512 tokens) but keep numbers sane.
MAX_TOKENS = 512
MAX_TOP_K = 1000


# A model's title -> its documented example bodies. FastAPI writes the OpenAPI document with exclude_none, which
# drops every null inside an example ("top_k": null); service.api.openapi_doc puts the bodies back from here.
DOCUMENTED_EXAMPLES: dict[str, list[Any]] = {}


def examples(*bodies: Any, strict: bool = False) -> ConfigDict:
    """A model_config whose JSON schema, and so OpenAPI and /docs, shows ``bodies`` (``strict``: no coercion)."""

    def show(schema: dict[str, Any], model: type[BaseModel]) -> None:
        schema["examples"] = list(bodies)
        DOCUMENTED_EXAMPLES[str(schema.get("title", model.__name__))] = list(bodies)

    config = ConfigDict(json_schema_extra=show)
    if strict:
        config["strict"] = True
    return config


class SentInFull(BaseModel):
    """A response the server always sends whole: in the OpenAPI document every field is required (a field with a
    default is still sent), so generated clients need no fallback for it."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class ErrorDetail(SentInFull):
    type: str = Field(
        description="Machine-readable error kind, e.g. bad_request, model_not_found, overloaded.",
        json_schema_extra={"enum": list(ERROR_TYPES)},
    )
    message: str = Field(description="What went wrong, for humans.")


class ErrorResponse(SentInFull):
    """The body of every 4xx/5xx response."""

    model_config = examples({"error": {"type": "model_not_found", "message": "no model named 'x'"}})

    error: ErrorDetail


class Batching(SentInFull):
    """The batch limits and ORT threads a model runs with: tuned at start-up or as configured."""

    max_batch_tokens: int
    max_batch_size: int
    intra_op_threads: int = Field(description="Threads of the model's one ONNX Runtime session.")
    workers: int = Field(1, description="Worker threads taking batches from the model's queue.")
    parallel_runs: int = Field(1, description="How many of them may run a batch on the session at once.")
    tuned: bool = Field(description="Picked by start-up tuning (false: the settings' values).")
    candidates: dict[str, list[int]] = Field(
        default_factory=dict, description="Per tuned setting, the values the tuner picked from."
    )
    tune_seconds: float = Field(0.0, description="Time start-up tuning took for this model.")
    batch_overhead_tokens: float | None = Field(
        None, description="A GPU's measured cost of one model call in tokens (null: the batch_overhead_tokens setting)."
    )
    split_threads: bool = Field(
        False,
        description="A batch that runs alone gets every intra-op thread, batches side by side one thread each (a "
        "second session of a small model).",
    )
    intra_op_spinning: bool = Field(
        False,
        description="The threads of a batch that runs on every intra-op thread spin between its operators until the "
        "run ends (no other run beside it: a small model's lone batches, a larger model's one-at-a-time batches).",
    )
    shape_buckets: bool = Field(
        False,
        description="Each batch runs padded up to one of a few shapes, on a GPU every one of them run once at "
        "start-up (--shape-buckets; by default on a GPU).",
    )


class QuantizationEval(SentInFull):
    """fp32 and int8 scored at export on labelled rows (``--eval-data``), in percent of the task's metric."""

    metric: str
    rows: int
    fp32: float
    int8: float
    loss: float = Field(description="fp32 - int8, in percentage points.")
    max_loss: float | None = Field(description="The export's --max-loss budget (null: none).")
    changed_predictions: int
    int8_accepted: bool = Field(description="Whether the int8 graph was written (false: the bundle kept fp32).")


class ModelCard(SentInFull):
    name: str
    task: str = Field(description="The task it serves.", json_schema_extra={"enum": list(TASK_NAMES)})
    labels: list[str] = Field(description="Label names in id order (classification tasks; empty otherwise).")
    max_length: int = Field(description="Longest row the model takes, in tokens, special tokens included.")
    quantization: str = Field(description="Weights' quantization.", json_schema_extra={"enum": list(QUANTIZATIONS)})
    precision: str = Field(description="Compute precision.", json_schema_extra={"enum": list(PRECISIONS)})
    architecture: str = Field(description="The checkpoint's architecture, e.g. RobertaForSequenceClassification.")
    device: str = Field("cpu", description="Where the model runs: cpu, or cuda:N (a GPU).")
    mask_token: str | None = Field(
        None, description="fill-mask: the token a masked position is written with ([MASK] or <mask>); null otherwise."
    )
    request_defaults: dict[str, Any] = Field(
        default_factory=dict,
        description="Parameters this model answers with when a request leaves them out (bundle.json's), e.g. "
        '{"aggregation_strategy": "first"}; a request that sends one overrides it.',
    )
    prompts: dict[str, str] = Field(
        default_factory=dict, description="feature-extraction: the named prompts prompt_name picks from."
    )
    batching: Batching | None = None
    quantization_eval: QuantizationEval | None = Field(
        None, description="What int8 cost on the export's eval data (null: not measured)."
    )
    endpoints: list[str] = Field(
        default_factory=list, description="Cohere's endpoints this model answers (embed, classify or rerank)."
    )
    ready: bool


class OpenAIModel(SentInFull):
    """A model as OpenAI's ``GET /v1/models`` lists it (what OpenAI clients' ``models.list()`` reads)."""

    id: str = Field(description="The model's name, as requests name it.")
    object: Literal["model"] = "model"
    created: int = Field(0, description="Unix time the model's bundle was written.")
    owned_by: str = "bertserve"


class ModelDetail(ModelCard):
    """One model: its card, with OpenAI's model fields (what ``openai`` clients' ``models.retrieve`` and Cohere's
    ``models.get`` read)."""

    id: str = Field(description="The model's name, as requests name it.")
    object: Literal["model"] = "model"
    created: int = Field(0, description="Unix time the model's bundle was written.")
    owned_by: str = "bertserve"


class BrokenModel(SentInFull):
    """A bundle that could not be loaded, skipped at start-up (skip_broken)."""

    name: str
    reason: str = Field(description="What is wrong with the bundle.")


class ModelsResponse(SentInFull):
    model_config = examples(
        {
            "models": [
                {
                    "name": "sst2",
                    "task": "text-classification",
                    "labels": ["negative", "positive"],
                    "max_length": 128,
                    "quantization": "int8",
                    "precision": "fp32",
                    "device": "cpu",
                    "ready": True,
                }
            ],
            "object": "list",
            "data": [{"id": "sst2", "object": "model", "created": 1767225600, "owned_by": "bertserve"}],
        },
    )

    models: list[ModelCard]
    object: Literal["list"] = "list"
    data: list[OpenAIModel] = Field(
        default_factory=list, description="The same models in OpenAI's list shape, for OpenAI clients."
    )
    broken: list[BrokenModel] = Field(
        default_factory=list, description="Bundles that could not be loaded and are not served (skip_broken)."
    )


class HealthResponse(SentInFull):
    model_config = examples({"status": "ok", "models": {"sst2": True, "conll": True}})

    status: Literal["ok"] = Field(description="Always ok: a service that is not ready answers 503 with an error body.")
    models: dict[str, bool] = Field(default_factory=dict, description="Model name -> ready.")


class TaskRequest(BaseModel):
    """Fields every task request has."""

    # strict: no silent coercion (true -> 1, 5.0 -> 5, "3" -> 3) of what clients send
    model_config = ConfigDict(extra="forbid", strict=True)
    task: ClassVar[str]

    model: str | None = Field(
        None, description="Model name; may be omitted when exactly one loaded model serves this task."
    )

    def given_fields(self) -> frozenset[str]:
        """The fields the request set to something other than their documented default. A field sent at its default
        counts as left out (clients generated from the OpenAPI document send every field), so it neither clashes
        with another field nor overrides a model's request default."""
        given = set()
        for name in self.model_fields_set:
            field = type(self).model_fields[name]
            default = field.get_default(call_default_factory=True)
            if getattr(self, name) != default:
                given.add(name)
        return frozenset(given)

    def input_list(self) -> list[Any]:
        """The inputs as a list (a single input becomes a list of one)."""
        raise NotImplementedError

    def to_task(self) -> tuple[list[Any], Any]:
        """``(inputs, params)`` in the task handler's types."""
        raise NotImplementedError
