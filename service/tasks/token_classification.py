"""Token classification (NER) with the semantics of transformers 4.57.6 ``TokenClassificationPipeline``.

Texts longer than the model's ``max_length`` are windowed, never truncated: windows of
``max_length`` tokens overlapping by ``stride`` tokens, merged by the pipeline's
``aggregate_overlapping_entities``. Without an explicit ``stride`` a text that fits is one window
(what the pipeline gives), and a longer one is windowed with ``default_stride(max_length)`` =
``max_length // 4`` tokens of overlap (the pipeline would truncate it). With
``aggregation_strategy="none"`` the pipeline refuses an explicit ``stride``; so does this handler,
but long texts are still windowed, and ``index`` is then the token's index in the whole text's
encoding (with [CLS] at 0), which for the first window is the pipeline's ``index``.

Pre-split words (``WordsInput``, e.g. CoNLL tokens) are labelled one entry per word, in word order:
the argmax label of the word's first sub-token, the convention fine-tuning trains and scores with
(``contract.decoding``, the decode path training's evaluation shares). ``index`` is then the
word's index, ``start``/``end`` its span in ``" ".join(words)``; ``aggregation_strategy`` and
``ignore_labels`` do not apply, and ``stride`` is accepted with any strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, Self, cast

import numpy as np
from pydantic import BaseModel, Field, model_validator
from tokenizers import Encoding

from contract.tasks import task_spec
from contract.word_decoding import WordWindows, encode_word_lists, label_words, window_stride
from service.oip import layouts as oip
from service.schemas.common import MAX_TOKENS, TaskRequest, examples
from service.tasks import base
from service.tasks.base import HfMapping, InputError, ModelContext, Prepared, TaskUnit, V1Route
from service.tasks.token_grouping import text_entities

DEFAULTS = task_spec("token-classification").pipeline_defaults  # stated once, in the task table

STRATEGIES = ("none", "simple", "first", "average", "max")


@dataclass(frozen=True, slots=True)
class TokenClassificationParams:
    aggregation_strategy: str = DEFAULTS["aggregation_strategy"]
    ignore_labels: tuple[str, ...] = tuple(DEFAULTS["ignore_labels"])
    stride: int | None = None


@dataclass(frozen=True, slots=True)
class WordsInput:
    """One input of pre-split words: each gets one label. ``text`` (``" ".join(words)``) is what the
    offsets point into; being a str field, it is also what the engine counts as the input's size."""

    words: tuple[str, ...]
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        words = tuple(self.words)
        object.__setattr__(self, "words", words)
        object.__setattr__(self, "text", " ".join(word if isinstance(word, str) else "" for word in words))


@dataclass(slots=True)
class _NerState:
    text: str
    windows: list[Encoding]
    first_token_index: list[int]  # per window: index in the whole text's encoding of its first token


def _strategy(params: TokenClassificationParams) -> str:
    strategy = params.aggregation_strategy.lower()
    if strategy not in STRATEGIES:
        raise InputError(
            f"aggregation_strategy must be one of {', '.join(STRATEGIES)}, got {params.aggregation_strategy!r}"
        )
    return strategy


def _stride(ctx: ModelContext, params: TokenClassificationParams, strategy: str) -> int:
    """The windows' overlap: ``params.stride``, or ``default_stride`` (shared with training's evaluation)."""
    if params.stride is not None and strategy == "none":
        raise InputError('stride needs an aggregation_strategy other than "none" (as in transformers)')
    if params.stride is None:
        return ctx.window_stride
    return window_stride(ctx.tokenizer, ctx.max_length, params.stride)


def _first_token_indices(windows: list[Encoding], stride: int) -> list[int]:
    """Where each window starts in the untruncated encoding: windows advance by (content - stride) tokens."""
    indices = [0]
    for window in windows[:-1]:
        content = sum(1 for special in window.special_tokens_mask if not special)
        indices.append(indices[-1] + content - stride)
    return indices


class TokenClassificationHandler:
    def prepare(self, ctx: ModelContext, inputs: list[Any], params: TokenClassificationParams) -> list[Prepared]:
        if any(isinstance(item, WordsInput) for item in inputs):
            return _prepare_words(ctx, inputs, params)
        strategy = _strategy(params)
        stride = _stride(ctx, params, strategy)
        texts = [base.require_text(item) for item in inputs]
        tokenizer = base.truncating_tokenizer(ctx.tokenizer, ctx.max_length, stride, "longest_first")
        prepared = []
        for text, encoding in zip(texts, base.encode_batch(tokenizer, texts, "text"), strict=True):
            windows = [encoding, *encoding.overflowing]  # transformers' order
            state = _NerState(text, windows, _first_token_indices(windows, stride))
            prepared.append(Prepared(sequences=[base.to_sequence(window) for window in windows], state=state))
        return prepared

    def postprocess(
        self,
        ctx: ModelContext,
        prepared: Prepared,
        outputs: list[dict[str, np.ndarray]],
        params: TokenClassificationParams,
    ) -> list[dict[str, Any]]:
        if isinstance(prepared.state, WordWindows):
            return label_words(prepared.state, [output["logits"] for output in outputs], ctx.id2label)
        state: _NerState = prepared.state
        logits = [output["logits"] for output in outputs]
        return text_entities(
            ctx, state.text, state.windows, state.first_token_index, logits, _strategy(params), params.ignore_labels
        )


def _prepare_words(ctx: ModelContext, inputs: list[Any], params: TokenClassificationParams) -> list[Prepared]:
    """Word mode: every input a ``WordsInput``; windows overlap by ``stride`` (default ``default_stride``)."""
    if not all(isinstance(item, WordsInput) for item in inputs):
        raise InputError("a request takes texts or lists of words, not both")
    stride = _stride(ctx, params, "simple")  # no aggregation applies to words: any strategy takes a stride
    tokenizer = base.truncating_tokenizer(ctx.tokenizer, ctx.max_length, stride, "longest_first")
    encoded = encode_word_lists(tokenizer, [item.words for item in inputs])
    return [Prepared(sequences=[base.to_sequence(window) for window in item.windows], state=item) for item in encoded]


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


OIP = oip.texts_with_list(
    TokenClassificationRequest, "ignore_labels", "entities", options=("aggregation_strategy", "stride")
)


UNIT = TaskUnit(
    "token-classification",
    TokenClassificationHandler(),
    V1Route(
        TokenClassificationRequest,
        TokenClassificationResponse,
        "Find entities in texts (transformers' token-classification pipeline semantics).",
    ),
    HfMapping(TokenClassificationRequest),
    oip=OIP,
)
