"""Cohere's embed bodies for a feature-extraction model: v1 (``cohere.Client.embed``, ``POST /v1/embed``) and v2
(``cohere.ClientV2.embed``, ``POST /v2/embed``), as the task's ``EmbeddingParams``; ``service.api.cohere`` answers
them. ``input_type`` picks the model's sentence-transformers prompt for it (``INPUT_TYPE_PROMPTS``)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator

from service.schemas.common import TaskRequest, examples
from service.tasks.feature_extraction import EmbeddingParams

COHERE_INPUT_TYPES = Literal["search_document", "search_query", "classification", "clustering", "image"]
COHERE_EMBEDDING_TYPES = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]


class CohereEmbedRequest(TaskRequest):
    """Cohere's v1 embed body (``cohere.Client.embed``). Texts only; ``int8`` and ``uint8`` need the model's
    quantization ranges (bundle.json ``embedding_ranges``, from ``--embedding-calibration`` at export)."""

    model_config = examples(
        {"model": "minilm", "texts": ["A man is eating food."], "input_type": "search_document"},
        {"model": "minilm", "texts": ["Who is eating?"], "input_type": "search_query", "embedding_types": ["float"]},
    )
    task: ClassVar[str] = "feature-extraction"

    texts: Annotated[list[str], Field(min_length=1)] = Field(description="The texts to embed.")
    images: list[str] | None = Field(None, description="Not taken: this server embeds texts.")
    input_type: COHERE_INPUT_TYPES | None = Field(
        None,
        description="search_query: the model's prompt named query (sentence-transformers' encode_query), else "
        "search_query; search_document: document, passage or corpus (encode_document), else search_document; "
        "classification, clustering: the prompt of that name; none of them: the model's default prompt.",
    )
    embedding_types: Annotated[list[COHERE_EMBEDDING_TYPES], Field(min_length=1)] | None = Field(
        None,
        description="Left out: floats (response_type embeddings_floats). Else each type asked for (embeddings_by_type):"
        " float; binary / ubinary (the signs packed 8 a byte, as sentence-transformers' quantize_embeddings); base64 "
        "(float32 little-endian bytes); int8 / uint8 (quantize_embeddings' buckets of the model's calibrated ranges: "
        "a model exported with --embedding-calibration, else a 400).",
    )
    truncate: Literal["NONE", "START", "END"] = Field(
        "END", description="A text longer than the model's max length: cut at its END or START, or NONE: a 400."
    )

    @field_validator("images")
    @classmethod
    def _texts_only(cls, value: list[str] | None) -> list[str] | None:
        if value:
            raise ValueError("images are not embedded: this server embeds texts")
        return value

    @field_validator("input_type")
    @classmethod
    def _not_image(cls, value: str | None) -> str | None:
        if value == "image":
            raise ValueError("input_type image is not taken: this server embeds texts")
        return value

    def input_list(self) -> list[str]:
        return self.texts

    def embedding_params(self) -> EmbeddingParams:
        direction = "left" if self.truncate == "START" else "right"
        return EmbeddingParams(truncate=self.truncate != "NONE", truncation_direction=direction,
                               input_type=self.input_type)  # fmt: skip

    def to_task(self) -> tuple[list[Any], EmbeddingParams]:
        return list(self.texts), self.embedding_params()


class CohereV2EmbedRequest(CohereEmbedRequest):
    """Cohere's v2 embed body (``cohere.ClientV2.embed``): v1's, an output dimension and a token cap; mixed-content
    ``inputs`` are not taken."""

    model_config = examples(
        {"model": "minilm", "texts": ["A man is eating food."], "input_type": "search_document"},
        {"model": "minilm", "texts": ["Who is eating?"], "input_type": "search_query",
         "embedding_types": ["float", "binary"], "output_dimension": 128},
    )  # fmt: skip

    inputs: list[Any] | None = Field(None, description="Not taken (mixed text and image content): send texts.")
    max_tokens: int | None = Field(None, ge=1, description="Cut (or, with truncate NONE, refuse) at this many tokens.")
    output_dimension: int | None = Field(
        None, ge=1, description="Keep the first N values (re-normalised when the model's vectors are normalised)."
    )
    priority: int | None = Field(None, ge=0, description="Accepted for Cohere's clients; not used.")

    @field_validator("inputs")
    @classmethod
    def _no_mixed_content(cls, value: list[Any] | None) -> list[Any] | None:
        if value:
            raise ValueError("inputs (mixed text and image content) are not taken: send texts")
        return value

    def to_task(self) -> tuple[list[Any], EmbeddingParams]:
        params = dataclasses.replace(self.embedding_params(), max_tokens=self.max_tokens)
        return list(self.texts), dataclasses.replace(params, dimensions=self.output_dimension)


class CohereEmbeddingsByType(BaseModel):
    float_: list[list[float]] | None = Field(None, alias="float", description="Float vectors, one per text.")
    int8: list[list[int]] | None = Field(None, description="Each value's bucket of the model's range, -128..127.")
    uint8: list[list[int]] | None = Field(None, description="Each value's bucket of the model's range, 0..255.")
    binary: list[list[int]] | None = Field(None, description="Signs packed 8 a byte, as int8 (-128..127).")
    ubinary: list[list[int]] | None = Field(None, description="Signs packed 8 a byte, as uint8 (0..255).")
    base64: list[str] | None = Field(None, description="Base64 of each vector's float32 little-endian bytes.")


class CohereMeta(BaseModel):
    api_version: dict[str, str] = Field(description='{"version": "1"} or "2".')
    billed_units: dict[str, int] = Field(description="input_tokens: the tokens the model read.")


class CohereEmbedResponse(BaseModel):
    model_config = examples(
        {"id": "3f2a", "response_type": "embeddings_floats", "embeddings": [[0.0123, -0.0456]],
         "texts": ["A man is eating food."], "meta": {"api_version": {"version": "1"},
                                                    "billed_units": {"input_tokens": 8}}},
    )  # fmt: skip

    id: str
    response_type: Literal["embeddings_floats", "embeddings_by_type"]
    embeddings: list[list[float]] | CohereEmbeddingsByType = Field(
        description="embeddings_floats: one vector per text; embeddings_by_type: an object of each type asked for."
    )
    texts: list[str]
    meta: CohereMeta
