"""Cohere's tokenize and detokenize bodies (``cohere.Client.tokenize`` / ``.detokenize``, ``POST /v1/tokenize`` and
``/v1/detokenize``): the served model's own tokenizer, its ids and the text each covers, no special tokens."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from service.schemas.common import examples
from service.schemas.tei import TokenId

COHERE_META = {"api_version": {"version": "1"}}


class CohereTokenizeRequest(BaseModel):
    model_config = examples({"model": "minilm", "text": "tokenize me! :D"})

    text: str = Field(min_length=1, description="The text to tokenize.")
    model: str | None = Field(None, description="Model name; may be omitted when exactly one model is served.")


class CohereTokenizeResponse(BaseModel):
    model_config = examples(
        {"tokens": [19204, 4697, 2033, 999], "token_strings": ["token", "ize", "me", "!"], "meta": COHERE_META}
    )

    tokens: list[int] = Field(description="The text's token ids, without the model's special tokens.")
    token_strings: list[str] = Field(description="The text each token covers, in order.")
    meta: dict[str, Any]


class CohereDetokenizeRequest(BaseModel):
    model_config = examples({"model": "minilm", "tokens": [19204, 4697, 2033, 999]})

    tokens: Annotated[list[TokenId], Field(min_length=1)] = Field(description="Token ids of the model's vocabulary.")
    model: str | None = Field(None, description="Model name; may be omitted when exactly one model is served.")


class CohereDetokenizeResponse(BaseModel):
    model_config = examples({"text": "tokenize me!", "meta": COHERE_META})

    text: str = Field(description="The ids' text, special tokens left out.")
    meta: dict[str, Any]
