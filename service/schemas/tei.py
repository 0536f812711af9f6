"""text-embeddings-inference's bodies beyond ``/embed`` and ``/rerank``: ``/predict``, ``/tokenize``, ``/decode``,
``/info`` (``model`` is this service's addition everywhere: which model, when several are served)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, RootModel, Strict

from service.schemas.common import TaskRequest, examples
from service.tasks import ClassificationParams

Pair = Annotated[list[str], Field(min_length=2, max_length=2)]
OneOrPair = Annotated[list[str], Field(min_length=1, max_length=2)]
TokenId = Annotated[int, Strict(), Field(ge=0, le=2**31 - 1)]  # TEI's ids are int32; true is no id


class TeiPredictRequest(TaskRequest):
    """TEI's ``/predict``: one text, one pair (a list of two texts), or a batch of one- and two-text lists."""

    model_config = examples(
        {"inputs": "I like you."},
        {"inputs": ["A man is eating.", "Someone eats food."]},
        {"inputs": [["I like you."], ["A man is eating.", "Someone eats food."]], "raw_scores": True},
    )
    task: ClassVar[str] = "text-classification"

    inputs: str | Pair | Annotated[list[OneOrPair], Field(min_length=1)] = Field(
        description="A text, a pair of texts, or a batch of lists of one or two texts."
    )
    raw_scores: bool = Field(False, description="The head's logits instead of its probabilities.")
    truncate: bool | None = Field(
        False, description="Cut texts longer than the model's max length; false (TEI's default): such a text is a 400."
    )
    truncation_direction: Literal["Right"] = Field(
        "Right", description="Which end of a long text is cut (the right one: the only one served here)."
    )

    @property
    def batched(self) -> bool:
        return isinstance(self.inputs, list) and bool(self.inputs) and isinstance(self.inputs[0], list)

    def input_list(self) -> list[Any]:
        items = self.inputs if self.batched else [self.inputs]
        return [item if isinstance(item, str) else (item[0] if len(item) == 1 else tuple(item)) for item in items]

    def to_task(self) -> tuple[list[Any], ClassificationParams]:
        function = "none" if self.raw_scores else None
        params = ClassificationParams(top_k=None, function_to_apply=function, truncation=bool(self.truncate))
        return self.input_list(), params


class TeiPrediction(BaseModel):
    score: float
    label: str


class TeiPredictResponse(RootModel[list[TeiPrediction] | list[list[TeiPrediction]]]):
    model_config = examples([{"score": 0.98, "label": "positive"}, {"score": 0.02, "label": "negative"}])


class TeiTokenizeRequest(BaseModel):
    model_config = examples({"inputs": "test"}, {"inputs": ["test", "a second text"], "add_special_tokens": False})

    model: str | None = Field(None, description="Model name; may be omitted when exactly one model is served.")
    inputs: str | Annotated[list[str], Field(min_length=1)] = Field(description="A text or a list of texts.")
    add_special_tokens: bool = Field(True, description="Add the model's special tokens ([CLS], [SEP]).")


class SimpleToken(BaseModel):
    id: int
    text: str = Field(description="The token's text: the input's characters it covers (the token itself if none).")
    special: bool
    start: int | None = Field(description="Character offset of the token in the text (null for a special token).")
    stop: int | None = Field(description="Character offset after it (null for a special token).")


class TeiTokenizeResponse(RootModel[list[list[SimpleToken]]]):
    model_config = examples([[{"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}]])


class TeiDecodeRequest(BaseModel):
    model_config = examples({"ids": [101, 3231, 102]}, {"ids": [[101, 3231, 102]], "skip_special_tokens": False})

    model: str | None = Field(None, description="Model name; may be omitted when exactly one model is served.")
    ids: Annotated[list[TokenId], Field(min_length=1)] | Annotated[list[list[TokenId]], Field(min_length=1)] = Field(
        description="Token ids, or a list of lists of them."
    )
    skip_special_tokens: bool = Field(True, description="Leave special tokens out of the text.")


class TeiDecodeResponse(RootModel[list[str]]):
    model_config = examples(["test"])


class TeiInfo(BaseModel):
    """TEI's ``/info``, filled with what this service runs."""

    model_id: str
    served_model_name: str
    model_sha: str | None = None
    model_dtype: str = Field(description="float32, or int8 for a quantised bundle.")
    model_type: dict[str, dict[str, Any]] = Field(
        description='{"embedding": {"pooling"}}, or {"classifier": ...} / {"reranker": ...} with id2label and label2id.'
    )
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None = None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    sha: str | None = None
    docker_label: str | None = None
