from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self, cast

from pydantic import BaseModel, Field, model_validator

from service.schemas.common import MAX_TOKENS, TaskRequest, examples
from service.tasks import TokenClassificationParams, WordsInput
from service.tasks.token_classification import DEFAULTS

Word = Annotated[str, Field(min_length=1)]
WordList = Annotated[list[Word], Field(min_length=1)]
# settings the word mode has no use for: sending them with ``words`` (at other than their default) is a 422, not
# silently ignored
TEXT_ONLY_FIELDS = ("aggregation_strategy", "ignore_labels")


class TokenClassificationRequest(TaskRequest):
    model_config = examples(
        {"inputs": "John Smith works for Google in London."},
        {"model": "conll", "inputs": ["Mary lives in Paris."], "aggregation_strategy": "none"},
        {"words": ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]},
    )
    task: ClassVar[str] = "token-classification"

    inputs: str | Annotated[list[str], Field(min_length=1)] | None = Field(
        None, description="A text or a list of texts. Send exactly one of `inputs` and `words`."
    )
    words: WordList | Annotated[list[WordList], Field(min_length=1)] | None = Field(
        None,
        description=(
            "Pre-split words (e.g. CoNLL tokens), or a list of such lists; send exactly one of `inputs` and "
            "`words`. Every word gets exactly one entry, in word order: the label of its first sub-token "
            "(`entity`), that label's probability (`score`), the word's index (`index`), the word itself "
            "(`word`) and its character span in the words joined by single spaces (`start`, `end`). "
            "`aggregation_strategy` and `ignore_labels` do not apply to words and are refused with them."
        ),
    )
    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] = Field(
        DEFAULTS["aggregation_strategy"],
        description=(
            "How sub-word predictions merge into entities (as in transformers' pipeline). Texts only: "
            "not allowed with `words`."
        ),
    )
    ignore_labels: list[str] = Field(
        default_factory=lambda: list(DEFAULTS["ignore_labels"]),
        description="Labels left out of the results. Texts only: not allowed with `words` (every word is answered).",
    )
    stride: int | None = Field(
        DEFAULTS["stride"],
        ge=0,
        le=MAX_TOKENS,
        description="Overlap of windows over long texts or word lists, in tokens; default max length // 4.",
    )

    @model_validator(mode="after")
    def _one_kind_of_input(self) -> Self:
        if (self.inputs is None) == (self.words is None):
            raise ValueError("send exactly one of inputs (texts) and words (lists of pre-split words)")
        if self.words is not None:
            explicit = [name for name in TEXT_ONLY_FIELDS if name in self.given_fields()]
            if explicit:
                raise ValueError(f"{' and '.join(explicit)}: for texts only, not for words (every word gets one entry)")
        return self

    def word_lists(self) -> list[list[str]]:
        """``words`` as a list of word lists (one list becomes a list of one); empty for texts."""
        if self.words is None:
            return []
        if all(isinstance(word, str) for word in self.words):
            return [cast(list[str], self.words)]
        return cast(list[list[str]], self.words)

    def input_list(self) -> list[Any]:
        if self.words is not None:
            return self.word_lists()
        assert self.inputs is not None
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]

    def to_task(self) -> tuple[list[Any], TokenClassificationParams]:
        params = TokenClassificationParams(
            aggregation_strategy=self.aggregation_strategy,
            ignore_labels=tuple(self.ignore_labels),
            stride=self.stride,
        )
        if self.words is not None:
            return [WordsInput(tuple(words)) for words in self.word_lists()], params
        return list(self.input_list()), params


class Entity(BaseModel):
    entity_group: str | None = Field(None, description="Entity type, when aggregated.")
    entity: str | None = Field(None, description="Token label, when aggregation_strategy is none; a word's label.")
    index: int | None = Field(
        None, description="Token index, when aggregation_strategy is none; the word's index for words."
    )
    score: float
    word: str
    start: int | None
    end: int | None


class TokenClassificationResponse(BaseModel):
    model_config = examples(
        {
            "model": "conll",
            "results": [
                [
                    {"entity_group": "PER", "score": 0.99, "word": "john smith", "start": 0, "end": 10},
                    {"entity_group": "ORG", "score": 0.98, "word": "google", "start": 21, "end": 27},
                ]
            ],
        },
    )

    model: str
    results: list[list[Entity]] = Field(
        description="Per input (always a list), its entities in text order; for words, one entry per word."
    )
