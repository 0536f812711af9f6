"""Sentence embeddings from a feature-extraction bundle: one model row per text, its ``sentence_embedding``.

Pooling (mean or [CLS]) and, when bundle.json's ``normalize`` says so, L2 normalisation run inside the graph, as
sentence-transformers computes them. This handler tokenizes (truncating to the model's max length unless asked not
to), prepending the prompt a request names (``prompt_name``, a key of the sentence-transformers prompts recorded
in bundle.json) or the model's default one, and shapes the vector: ``dimensions`` keeps its first N values and
re-normalises them (OpenAI's Matryoshka-style cut), ``normalize`` L2-normalises a vector the graph did not
normalise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field, RootModel, ValidationError, ValidatorFunctionWrapHandler, field_validator

from service.oip import layouts as oip
from service.oip.codec import OutputTensor
from service.schemas.common import TaskRequest, examples
from service.tasks import base
from service.tasks.base import HfMapping, InputError, ModelContext, Prepared, TaskUnit
from service.tasks.sparse_embedding import SparseEmbeddingParams

DIRECTIONS = ("right", "left")
# Cohere's input_type: the prompts that mean it, first found wins, else the default prompt. sentence-transformers'
# encode_query takes "query" and encode_document the first of "document", "passage", "corpus"; Cohere's own names
# come after them (nomic-embed's prompts are named so).
INPUT_TYPE_PROMPTS = {
    "search_query": ("query", "search_query"),
    "search_document": ("document", "passage", "corpus", "search_document"),
    "classification": ("classification",),
    "clustering": ("clustering",),
}


@dataclass(frozen=True, slots=True)
class EmbeddingParams:
    # None: the vector as the bundle's graph gives it (normalised when bundle.json says normalize); True: L2-normalised;
    # False: the graph's vector unchanged (a graph that normalises cannot be undone).
    normalize: bool | None = None
    truncate: bool = True  # False: a text longer than the model's max length is a client error naming its length
    truncation_direction: str = "right"  # which end of a long text is cut
    dimensions: int | None = None  # keep the first N values (then re-normalise when the result is normalised)
    prompt_name: str | None = None  # a key of the model's prompts, prepended to every text (None: the default one)
    input_type: str | None = None  # Cohere's: the prompt named for it (INPUT_TYPE_PROMPTS) when prompt_name is None
    max_tokens: int | None = None  # cut (or, without truncate, refuse) texts at this many tokens, below the model's max


@dataclass(frozen=True, slots=True)
class TokenEmbeddingParams:
    """TEI's ``/embed_all``: every token's state (special tokens included, not normalised)."""

    truncate: bool = False
    truncation_direction: str = "right"
    prompt_name: str | None = None


@dataclass(frozen=True, slots=True)
class TokenEmbeddings:
    vectors: np.ndarray  # (tokens, hidden size) float32


@dataclass(frozen=True, slots=True)
class Embedding:
    vector: np.ndarray  # (dimensions or hidden size,) float32
    tokens: int  # tokens the model read for this text, special tokens included


def _check_params(params: EmbeddingParams) -> str:
    dimensions = params.dimensions
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        raise InputError(f"dimensions must be an integer >= 1, got {dimensions!r}")
    direction = params.truncation_direction.lower()
    if direction not in DIRECTIONS:
        raise InputError(f"truncation_direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
    return direction


def _text(item: Any, index: int) -> str:
    """A text to embed: a string with something in it (as every other task requires)."""
    return base.require_text(item, f"input {index}")


def _prompt(ctx: ModelContext, name: str | None, input_type: str | None = None) -> str:
    """The text prepended to each input, as sentence-transformers' ``prompt_name`` prepends it."""
    if name is None:
        named = (found for found in INPUT_TYPE_PROMPTS.get(input_type or "", ()) if found in ctx.prompts)
        return ctx.prompts.get(next(named, ""), ctx.default_prompt)
    if name not in ctx.prompts:
        known = ", ".join(sorted(ctx.prompts))
        raise InputError(f"prompt_name {name!r} is not one of this model's prompts ({known})" if known else
                         f"prompt_name {name!r}: this model declares no prompts")  # fmt: skip
    return ctx.prompts[name]


def l2_normalized(vector: np.ndarray) -> np.ndarray:
    """``vector / ||vector||`` in float32 (norm clamped at 1e-12, as torch's normalize and sentence-transformers do)."""
    norm = float(np.linalg.norm(vector.astype(np.float64)))
    return (vector / np.float32(max(norm, 1e-12))).astype(np.float32)


class FeatureExtractionHandler:
    def prepare(
        self, ctx: ModelContext, inputs: list[Any], params: EmbeddingParams | TokenEmbeddingParams
    ) -> list[Prepared]:
        if isinstance(params, TokenEmbeddingParams):
            if not ctx.token_embeddings:
                raise InputError("this model was exported without token embeddings (export it with --token-embeddings)")
            params = EmbeddingParams(None, params.truncate, params.truncation_direction, None, params.prompt_name)
        direction = _check_params(params)
        prompt = _prompt(ctx, params.prompt_name, params.input_type)
        texts = [prompt + _text(item, index) for index, item in enumerate(inputs)]
        return base.one_row_per_text(ctx, texts, params.truncate, direction, params.max_tokens)

    def postprocess(
        self,
        ctx: ModelContext,
        prepared: Prepared,
        outputs: list[dict[str, np.ndarray]],
        params: EmbeddingParams | TokenEmbeddingParams,
    ) -> Embedding | TokenEmbeddings:
        if isinstance(params, TokenEmbeddingParams):
            tokens = len(prepared.sequences[0])
            return TokenEmbeddings(np.asarray(outputs[0]["token_embeddings"][:tokens], dtype=np.float32))
        vector = np.asarray(outputs[0]["sentence_embedding"], dtype=np.float32)
        size = int(vector.shape[-1])
        cut = params.dimensions is not None and params.dimensions < size
        if params.dimensions is not None:
            if params.dimensions > size:
                raise InputError(f"dimensions {params.dimensions} is more than the model's {size}")
            vector = vector[: params.dimensions]
        normalized = ctx.embedding_normalized if params.normalize is None else params.normalize
        if normalized and (cut or not ctx.embedding_normalized):
            vector = l2_normalized(vector)
        return Embedding(vector=vector, tokens=len(prepared.sequences[0]))


class EmbeddingsRequest(TaskRequest):
    """OpenAI's embeddings body. Texts longer than the model's max length are truncated (OpenAI refuses them)."""

    model_config = examples(
        {"model": "minilm", "input": "A man is eating food."},
        {
            "model": "minilm",
            "input": ["A man is eating food.", "A man is riding a horse."],
            "encoding_format": "base64",
            "dimensions": 128,
        },
    )
    task: ClassVar[str] = "feature-extraction"

    input: str | Annotated[list[str], Field(min_length=1)] = Field(
        description="A text or a list of texts (token-id arrays are not taken); each is cut to the model's max length."
    )
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="float: a JSON list; base64: the little-endian float32 bytes, base64-encoded."
    )
    dimensions: int | None = Field(
        None, ge=1, description="Keep the first N values and re-normalise them; at most the model's hidden size."
    )
    user: str | None = Field(None, description="Accepted for compatibility; not used.")

    @field_validator("input", mode="wrap")
    @classmethod
    def _no_token_ids(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """OpenAI's API also takes tiktoken ids, and LangChain's ``OpenAIEmbeddings`` sends them by default; another
        tokenizer's ids would embed as nonsense, so they are refused, saying what to send (looked for only once the
        input has failed as texts; a valid request pays the wrapper's call, 0.998x in an A/B)."""
        try:
            return handler(value)
        except ValidationError:
            items = value if isinstance(value, list) else []
            if any(isinstance(item, int) or (isinstance(item, list) and item) for item in items):
                raise ValueError(
                    "token-id arrays are not taken: send the texts (LangChain's OpenAIEmbeddings sends tiktoken ids "
                    "unless check_embedding_ctx_length=False)"
                ) from None
            raise

    def input_list(self) -> list[str]:
        return self.input if isinstance(self.input, list) else [self.input]

    def to_task(self) -> tuple[list[Any], EmbeddingParams]:
        return self.input_list(), EmbeddingParams(truncate=True, dimensions=self.dimensions)


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int = Field(description="Position of the text in the request's input.")
    embedding: list[float] | str = Field(description="The vector: floats, or base64 of float32 little-endian bytes.")


class EmbeddingsUsage(BaseModel):
    prompt_tokens: int = Field(description="Tokens the model read, special tokens included, after truncation.")
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    model_config = examples(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.0123, -0.0456, 0.0789]}],
            "model": "minilm",
            "usage": {"prompt_tokens": 8, "total_tokens": 8},
        },
    )

    object: Literal["list"] = "list"
    data: list[EmbeddingData] = Field(description="One per input, in input order.")
    model: str
    usage: EmbeddingsUsage


class TeiTextsRequest(TaskRequest):
    """What text-embeddings-inference's embedding bodies share: one text or a list, and TEI's truncation rule."""

    inputs: str | Annotated[list[str], Field(min_length=1)] = Field(description="A text or a list of texts.")
    truncate: bool | None = Field(
        False, description="Cut texts longer than the model's max length; false (TEI's default): such a text is a 400."
    )
    truncation_direction: Literal["Right", "Left"] = Field("Right", description="Which end of a long text is cut.")

    def input_list(self) -> list[str]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]


class TeiEmbedRequest(TeiTextsRequest):
    """text-embeddings-inference's ``/embed`` body (``model`` is this service's addition)."""

    model_config = examples(
        {"inputs": "A man is eating food."},
        {"inputs": ["A man is eating food.", "A man is riding a horse."], "normalize": True, "truncate": True},
    )
    task: ClassVar[str] = "feature-extraction"

    normalize: bool = Field(
        True,
        description="L2-normalise the vectors; false returns the graph's vectors, which are already normalised when "
        "the model was exported with normalisation (bundle.json normalize).",
    )
    dimensions: int | None = Field(
        None, ge=1, description="Keep the first N values of each vector (re-normalised when normalize is true)."
    )
    prompt_name: str | None = Field(
        None,
        description="A key of the model's sentence-transformers prompts (/v1/models lists them): its text is "
        "prepended to each input. None: the default prompt (--default-prompt-name, --default-prompt or the model's "
        "own), if any.",
    )

    def to_task(self) -> tuple[list[Any], EmbeddingParams]:
        params = EmbeddingParams(
            normalize=self.normalize,
            truncate=bool(self.truncate),
            truncation_direction=self.truncation_direction.lower(),
            dimensions=self.dimensions,
            prompt_name=self.prompt_name,
        )
        return self.input_list(), params


class TeiEmbedSparseRequest(TeiTextsRequest):
    """text-embeddings-inference's ``/embed_sparse`` body, served by a fill-mask (masked-LM) model: SPLADE weights."""

    model_config = examples({"inputs": "A man is eating food."}, {"inputs": ["A man is eating.", "A dog runs."]})
    task: ClassVar[str] = "fill-mask"

    def to_task(self) -> tuple[list[Any], SparseEmbeddingParams]:
        return self.input_list(), SparseEmbeddingParams(bool(self.truncate), self.truncation_direction.lower())


class TeiEmbedAllRequest(TeiTextsRequest):
    """text-embeddings-inference's ``/embed_all`` body: every token's state, from a model exported with
    ``--token-embeddings``."""

    model_config = examples({"inputs": "A man is eating food."})
    task: ClassVar[str] = "feature-extraction"

    prompt_name: str | None = Field(None, description="As /embed's: a key of the model's prompts.")

    def to_task(self) -> tuple[list[Any], TokenEmbeddingParams]:
        params = TokenEmbeddingParams(bool(self.truncate), self.truncation_direction.lower(), self.prompt_name)
        return self.input_list(), params


class TeiEmbedAllResponse(RootModel[list[list[list[float]]]]):
    model_config = examples([[[0.12, -0.4, 0.03], [0.2, 0.1, -0.7]]])


class SparseValue(BaseModel):
    index: int = Field(description="The vocabulary id.")
    value: float = Field(description="log(1 + ReLU(MLM logit)), max-pooled over the text's tokens; > 0.")


class TeiEmbedSparseResponse(RootModel[list[list[SparseValue]]]):
    model_config = examples([[{"index": 2158, "value": 1.42}, {"index": 4521, "value": 0.37}]])


class TeiEmbedResponse(RootModel[list[list[float]]]):
    model_config = examples([[0.0123, -0.0456, 0.0789], [0.0321, 0.0654, -0.0987]])


def hf_read(body: dict[str, Any]) -> tuple[type, dict[str, Any], bool]:
    """HF's feature extraction takes its options at the top level, as TEI and huggingface_hub send them."""
    inputs = body.get("inputs")
    extra = {key: value for key, value in body.items() if key not in ("inputs", "parameters", "options")}
    return TeiEmbedRequest, {"inputs": inputs, **(body.get("parameters") or {}), **extra}, not isinstance(inputs, list)


def hf_answer(request: TaskRequest, results: list[Any], single: bool) -> Any:
    """One vector per text (a list, also for one text)."""
    return [item.vector for item in results]


def oip_embedding_tensors(request: Any, results: list[Any]) -> list[OutputTensor]:
    vectors = np.stack([np.asarray(item.vector, dtype=np.float32) for item in results])
    return [OutputTensor("embedding", "FP32", vectors.shape, vectors.reshape(-1))]


OIP = oip.TaskLayout(
    TeiEmbedRequest,
    inputs=(oip.TEXT,),
    outputs=(oip.TensorSpec("embedding", "FP32", (oip.BATCH, oip.BATCH)),),
    options=("normalize", "truncate", "truncation_direction"),
    body=oip.texts_body,
    tensors=oip_embedding_tensors,
)


UNIT = TaskUnit(
    "feature-extraction",
    FeatureExtractionHandler(),
    hf=HfMapping(TeiEmbedRequest, answer=hf_answer, read=hf_read),
    max_inputs_setting="max_embedding_inputs",
    max_tokens_setting="max_embedding_tokens",
    prompts=True,
    queue_holds_a_request=True,
    oip=OIP,
)
