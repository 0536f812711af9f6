"""Embeddings bodies: ``/v1/embeddings`` in OpenAI's shape, ``/embed`` in text-embeddings-inference's shape."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, RootModel

from service.schemas.common import TaskRequest, examples
from service.tasks import EmbeddingParams, SparseEmbeddingParams, TokenEmbeddingParams


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
