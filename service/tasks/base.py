"""The contract between the engine and the task handlers.

A handler turns one request's inputs into model rows (``ModelRow``; long inputs become several
windows) and turns those rows' outputs back into pipeline-shaped answers. Handlers are pure:
tokenizers + numpy, no I/O, no FastAPI, no onnxruntime. The engine batches rows from many requests
together; it hands each row's outputs back with padding removed.

Below the contract, the helpers the handlers share: score functions, input checks, truncating tokenizer copies.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
from tokenizers import Encoding, Tokenizer

from contract.bundle import Bundle, BundleError
from contract.decoding import DecodeInputError
from contract.tasks import entailment_id
from contract.word_decoding import window_stride


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One row for the model, unpadded. Its attention mask is all ones over its length."""

    input_ids: np.ndarray  # (T,) int64
    token_type_ids: np.ndarray  # (T,) int64

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(slots=True)
class Prepared:
    """Everything one input of a request needs: its model rows and what post-processing needs."""

    sequences: list[ModelRow]
    state: Any


@dataclass(frozen=True, slots=True)
class ModelContext:
    """Per-model facts a handler needs, fixed when the model is loaded."""

    tokenizer: Tokenizer  # no padding and no truncation configured
    max_length: int
    id2label: dict[int, str]
    problem_type: str | None
    mask_token: str
    mask_token_id: int
    cls_token_id: int
    sep_token_id: int
    pad_token_id: int
    unk_token_id: int | None = None  # None: the vocabulary has no unknown token (byte-level BPE needs none)
    # tokenizer_config.json's flag (tokenizer.json lacks it): decoded strings depend on it.
    clean_up_tokenization_spaces: bool = True
    # feature-extraction: the graph L2-normalises its sentence_embedding (bundle.json's normalize).
    embedding_normalized: bool = False
    # feature-extraction: the named prompts, and the text prepended when a request names none ("" for none).
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt: str = ""
    token_embeddings: bool = False  # feature-extraction: the graph also gives its token states (TEI's /embed_all)
    # feature-extraction: (2, dimensions) float32, each dimension's min and max over calibration texts (bundle.json's
    # embedding_ranges): the int8 / uint8 quantization ranges; None: not calibrated.
    embedding_ranges: np.ndarray | None = field(default=None, compare=False, repr=False)
    # token classification: a lone token's decoded string, filled as tokens are met (at most the vocabulary)
    token_strings: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # Worked out once here, not per request: the NLI head's entailment label (zero-shot; None: none) and the
    # default overlap of the windows over a long text (token classification).
    entailment_id: int | None = field(init=False)
    window_stride: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entailment_id", entailment_id(self.id2label))
        object.__setattr__(self, "window_stride", window_stride(self.tokenizer, self.max_length))

    @classmethod
    def from_bundle(cls, bundle: Bundle, default_prompt: str = "") -> ModelContext:
        """The handler's view of a bundle: its tokenizer (no padding, no truncation), label facts and prompts."""
        spec = bundle.spec
        try:
            tokenizer = Tokenizer.from_file(str(bundle.tokenizer_path))
        except Exception as exc:
            raise BundleError(bundle.path, f"tokenizer.json cannot be loaded: {exc}") from exc
        tokenizer.no_padding()
        tokenizer.no_truncation()

        def token_id(token: str) -> int:
            found = tokenizer.token_to_id(token)
            if found is None:
                raise BundleError(bundle.path, f"tokenizer lacks the special token {token!r}")
            return found

        special = spec.special_tokens
        return cls(
            tokenizer=tokenizer,
            max_length=spec.max_length,
            id2label=dict(spec.id2label),
            problem_type=spec.problem_type,
            mask_token=special.mask_token,
            mask_token_id=token_id(special.mask_token),
            cls_token_id=token_id(special.cls_token),
            sep_token_id=token_id(special.sep_token),
            pad_token_id=token_id(special.pad_token),
            unk_token_id=tokenizer.token_to_id(special.unk_token),
            clean_up_tokenization_spaces=spec.clean_up_tokenization_spaces,
            embedding_normalized=spec.normalize,
            prompts=dict(spec.prompts),
            token_embeddings="token_embeddings" in spec.outputs,
            embedding_ranges=np.asarray(spec.embedding_ranges, dtype=np.float32) if spec.embedding_ranges else None,
            default_prompt=default_prompt,
        )


# A request input that a handler, or the decoding it shares with training (``contract.decoding``), cannot process
# (empty text, no mask token, a stride out of range, ...): a client error, answered 400. One class for both.
InputError = DecodeInputError
Params = TypeVar("Params", bound=Hashable)  # a frozen dataclass


class TaskHandler(Protocol):
    """A task's tokenizing and decoding; which outputs its graph gives is the task table's (``contract.tasks``)."""

    def prepare(self, ctx: ModelContext, inputs: list[Any], params: Any) -> list[Prepared]:
        """Tokenize all inputs of one request (batch encoding); raise InputError for bad input."""
        ...

    def postprocess(
        self, ctx: ModelContext, prepared: Prepared, outputs: list[dict[str, np.ndarray]], params: Any
    ) -> Any:
        """``outputs[i]`` belongs to ``prepared.sequences[i]``; token-level arrays are cut to its length."""
        ...


def pipeline_answer(request: Any, results: list[Any], single: bool) -> Any:
    """The HF Inference API's answer: one input's answer for one input, else the list."""
    return results[0] if single else results


@dataclass(frozen=True)
class V1Route:
    """The task's ``POST /v1/<task>``: its body, its answer's model and what the route says it does."""

    request: type  # a service.schemas.common.TaskRequest
    response: type  # a pydantic model of {"model", "results"}
    description: str
    results: Callable[[Any, list[Any]], list[Any]] | None = None  # (request, engine results) -> results; None: as is

    def answer(self, decoded: Any, result: Any) -> dict[str, Any]:
        """The route's JSON answer to ``decoded`` (``service.api.entry.Decoded``) from the engine's ``result``."""
        results = result.results if self.results is None else self.results(decoded.request, result.results)
        return {"model": result.model, "results": results}


@dataclass(frozen=True)
class HfMapping:
    """How the Hugging Face Inference API's ``{"inputs", "parameters"}`` body reaches the task and its answer returns.

    ``read``: (body) -> the request model and its fields, and whether the body counts as one input (default: the v1
    request's fields are ``inputs`` and ``parameters``' members); ``answer``: (request, results, single) -> the
    pipeline-shaped JSON. Several mappings may serve one task's models (an embeddings model answers feature
    extraction and sentence similarity): each body goes to the first that ``accepts`` it."""

    request: type
    answer: Callable[[Any, list[Any], bool], Any] = pipeline_answer
    read: Callable[[dict[str, Any]], tuple[type, dict[str, Any], bool]] | None = None
    serves: str | None = None  # the task of the models that answer it (None: the unit's own)
    accepts: Callable[[dict[str, Any]], bool] | None = None  # the bodies that are its (None: those no other takes)


@dataclass(frozen=True)
class TaskUnit:
    """Everything a task is: its module declares one, and engines, settings and protocols iterate
    ``service.tasks.UNITS`` instead of naming tasks. Its defaults live in the contract's task table
    (``contract.tasks``), which the request schema and the handler both read."""

    name: str  # the task as v1 paths and OpenAPI tags name it
    handler: TaskHandler | None = None  # None: served by another task's engines (its request's ``task``)
    v1: V1Route | None = None
    hf: HfMapping | None = None
    oip: Any = None  # its service.oip.layouts.TaskLayout: the Open Inference Protocol's tensors (None: not served)
    # The request limits' settings (their values, flags and env variables follow from the names).
    max_inputs_setting: str = "max_inputs_per_request"
    max_tokens_setting: str = "max_request_tokens"
    prompts: bool = False  # takes sentence-transformers prompts (the bundle's default one is applied)
    # One request may bring max_inputs rows (embeddings: thousands of texts): the model's queue holds one such.
    queue_holds_a_request: bool = False


_VOCABULARY_CACHE_SIZE = 32
_COPIES_PER_THREAD = 16
_thread_copies = threading.local()
_vocabulary_lock = threading.Lock()
_vocabulary_cache: OrderedDict[int, tuple[Tokenizer, dict[str, int]]] = OrderedDict()


def softmax(values: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, written as the pipelines write it (keeps float32 as float32)."""
    shifted = np.exp(values - np.max(values, axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def sigmoid(values: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-values))


def require_text(text: object, what: str = "text") -> str:
    if not isinstance(text, str):
        raise InputError(f"{what} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError(f"{what} is empty")
    return text


def require_top_k(top_k: int, what: str = "top_k") -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise InputError(f"{what} must be an integer >= 1, got {top_k!r}")
    return top_k


def truncating_tokenizer(
    base: Tokenizer, max_length: int, stride: int = 0, strategy: str = "longest_first", direction: str = "right"
) -> Tokenizer:
    """This thread's copy of ``base``, with truncation (and overflowing windows) set as asked.

    The engine shares one unconfigured tokenizer between its prepare threads; configuring truncation
    on it would race between requests with different settings. Each thread keeps its own copy (made
    once: copying a 30k-word tokenizer takes ~80 ms) and reconfigures it, which is cheap.
    """
    copies: dict[int, tuple[Tokenizer, Tokenizer]] = _thread_copies.__dict__.setdefault("copies", {})
    hit = copies.get(id(base))
    if hit is None or hit[0] is not base:
        if len(copies) >= _COPIES_PER_THREAD:
            copies.pop(next(iter(copies)))
        configured = Tokenizer.from_str(base.to_str())
        configured.no_padding()
        copies[id(base)] = hit = (base, configured)
    configured = hit[1]
    wanted = {"max_length": max_length, "stride": stride, "strategy": strategy, "direction": direction}
    current = configured.truncation
    if current is None or any(current.get(key) != value for key, value in wanted.items()):
        configured.enable_truncation(max_length, stride=stride, strategy=strategy, direction=direction)
    return configured


def vocabulary(tokenizer: Tokenizer) -> dict[str, int]:
    """``tokenizer.get_vocab()`` (added tokens included), built once per tokenizer: it is a large dict."""
    key = id(tokenizer)
    with _vocabulary_lock:
        hit = _vocabulary_cache.get(key)
        if hit is not None and hit[0] is tokenizer:
            return hit[1]
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    with _vocabulary_lock:
        _vocabulary_cache[key] = (tokenizer, vocab)
        while len(_vocabulary_cache) > _VOCABULARY_CACHE_SIZE:
            _vocabulary_cache.popitem(last=False)
    return vocab


def encode_batch(tokenizer: Tokenizer, inputs: list, what: str = "input") -> list[Encoding]:
    """``tokenizer.encode_batch``; a tokenizer refusal (e.g. a question too long to window) is a client error."""
    try:
        if len(inputs) == 1:  # one request, one text: encode() skips encode_batch's thread-pool dispatch
            item = inputs[0]
            pair = isinstance(item, tuple | list)
            return [tokenizer.encode(*item) if pair else tokenizer.encode(item)]
        return tokenizer.encode_batch(inputs, add_special_tokens=True)
    except Exception as exc:  # tokenizers raises a bare Exception for truncation errors
        raise InputError(f"cannot tokenize the {what}: {exc}") from exc


def require_fit(encodings: list[Encoding], max_length: int, too_long: Callable[[int, int], str]) -> None:
    """The tasks' one rule for an input they were told not to cut: over ``max_length`` tokens it is a client error,
    worded by ``too_long(index, tokens)`` in the task's terms (what to send to have it cut)."""
    for index, encoding in enumerate(encodings):
        if len(encoding.ids) > max_length:
            raise InputError(too_long(index, len(encoding.ids)))


def one_row_per_text(
    ctx: ModelContext, texts: list[str], truncate: bool, direction: str = "right", max_tokens: int | None = None
) -> list[Prepared]:
    """Embedding-style inputs: each text one model row, cut to the model's max length (or ``max_tokens``, when
    fewer) from ``direction`` when ``truncate``, else a client error naming the first text that is too long (TEI's
    rule)."""
    limit = ctx.max_length if max_tokens is None else min(max_tokens, ctx.max_length)
    if max_tokens is not None and max_tokens <= (special := ctx.tokenizer.num_special_tokens_to_add(False)):
        raise InputError(f"max_tokens {max_tokens} leaves no room for text: the model adds {special} special tokens")
    tokenizer = truncating_tokenizer(ctx.tokenizer, limit, direction=direction) if truncate else ctx.tokenizer
    encodings = encode_batch(tokenizer, texts, "text")
    if not truncate:
        require_fit(
            encodings, limit,
            lambda index, tokens: f"input {index} is {tokens} tokens long; "
            + (f"the model takes at most {limit}" if limit == ctx.max_length else f"max_tokens is {limit}")
            + " (truncate: true cuts it; on Cohere's routes truncate: END or START)",
        )  # fmt: skip
    return one_row_each(encodings)


def one_row_each(encodings: list[Encoding]) -> list[Prepared]:
    """Each input one model row, with nothing kept for post-processing."""
    return [Prepared(sequences=[to_sequence(encoding)], state=None) for encoding in encodings]


def to_sequence(encoding: Encoding) -> ModelRow:
    return ModelRow(
        input_ids=np.asarray(encoding.ids, dtype=np.int64),
        token_type_ids=np.asarray(encoding.type_ids, dtype=np.int64),
    )


def params_from(request: Any, kind: type[Params], **given: Any) -> Params:
    """``kind`` (a task's parameters dataclass) from ``request``'s fields of the same names (a pydantic request
    model's), ``given`` on top."""
    fields = type(request).model_fields
    taken = {name: getattr(request, name) for name in _field_names(kind) if name in fields and name not in given}
    return kind(**taken, **given)


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(item.name for item in dataclasses.fields(kind))
