"""Fill-mask with the semantics of transformers 4.57.6 ``FillMaskPipeline``.

Every mask gets its own list of predictions (probabilities of each mask on its own, as the
pipeline's multi-mask mode gives). ``targets`` restrict the vocabulary: a target that is not a
vocabulary entry is replaced by the first token it tokenizes to, and one that tokenizes to nothing
is dropped, as in the pipeline. Texts longer than the model's ``max_length`` are refused (the
pipeline does not truncate fill-mask inputs either). Given ``SparseEmbeddingParams`` the handler answers SPLADE
sparse vectors from the same logits instead (``service.tasks.sparse_embedding``).

The pipeline decodes ``sequence`` and ``token_str`` with the tokenizer's ``decode`` and then, when
the checkpoint's tokenizer_config sets ``clean_up_tokenization_spaces``, with transformers'
``clean_up_tokenization`` (``"in ' s"`` -> ``"in's"``). ``tokenizer.json`` does not carry that flag,
so it is a handler setting, ``True`` by default: what BERT checkpoints (the hub's and the ones
``training`` writes) set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import numpy as np
from pydantic import BaseModel, Field

from contract.tasks import task_spec
from service.oip import layouts as oip
from service.schemas.common import MAX_TOP_K, TaskRequest, examples
from service.tasks import base
from service.tasks.base import HfMapping, InputError, ModelContext, Prepared, TaskUnit, V1Route
from service.tasks.sparse_embedding import SparseEmbedding, SparseEmbeddingParams, prepare_sparse, sparse_vector

DEFAULTS = task_spec("fill-mask").pipeline_defaults  # stated once, in the task table


@dataclass(frozen=True, slots=True)
class FillMaskParams:
    top_k: int = DEFAULTS["top_k"]
    targets: tuple[str, ...] | None = DEFAULTS["targets"]


def clean_up_tokenization(text: str) -> str:
    """transformers' ``PreTrainedTokenizerBase.clean_up_tokenization``."""
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )


def top_indices(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, largest first (ties: lower index first)."""
    if k >= len(values):
        return np.argsort(-values, kind="stable")
    kth = -np.partition(-values, k - 1)[k - 1]  # the k-th largest value
    above = np.flatnonzero(values > kth)
    candidates = np.concatenate([above, np.flatnonzero(values == kth)[: k - len(above)]])
    return candidates[np.argsort(-values[candidates], kind="stable")]


class FillMaskHandler:
    def prepare(
        self, ctx: ModelContext, inputs: list[Any], params: FillMaskParams | SparseEmbeddingParams
    ) -> list[Prepared]:
        if isinstance(params, SparseEmbeddingParams):
            return prepare_sparse(ctx, inputs, params)
        base.require_top_k(params.top_k)
        target_ids = self.target_ids(ctx, params)
        texts = [base.require_text(item) for item in inputs]
        prepared = []
        for encoding in base.encode_batch(ctx.tokenizer, texts, "text"):
            if ctx.mask_token_id not in encoding.ids:
                raise InputError(f"no mask token ({ctx.mask_token}) found in the input")
            if len(encoding.ids) > ctx.max_length:
                raise InputError(f"the text is {len(encoding.ids)} tokens; this model takes at most {ctx.max_length}")
            prepared.append(Prepared(sequences=[base.to_sequence(encoding)], state=target_ids))
        return prepared

    def target_ids(self, ctx: ModelContext, params: FillMaskParams) -> np.ndarray | None:
        """The pipeline's ``get_target_ids`` (same de-duplication, through a set)."""
        if params.targets is None:
            return None
        vocab = base.vocabulary(ctx.tokenizer)
        ids = []
        for target in params.targets:
            if not isinstance(target, str):
                raise InputError(f"targets must be strings, got {type(target).__name__}")
            id_ = vocab.get(target)
            if id_ is None:
                pieces = ctx.tokenizer.encode(target, add_special_tokens=False).ids
                if not pieces:
                    continue
                id_ = pieces[0]
            ids.append(id_)
        unique = list(set(ids))
        if not unique:
            raise InputError("none of the targets maps to a vocabulary token")
        return np.array(unique)

    def decode(self, ctx: ModelContext, ids: list[int] | np.ndarray, skip_special_tokens: bool) -> str:
        text = ctx.tokenizer.decode([int(id_) for id_ in ids], skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if ctx.clean_up_tokenization_spaces else text

    def postprocess(
        self,
        ctx: ModelContext,
        prepared: Prepared,
        outputs: list[dict[str, np.ndarray]],
        params: FillMaskParams | SparseEmbeddingParams,
    ) -> list[list[dict[str, Any]]] | SparseEmbedding:
        if isinstance(params, SparseEmbeddingParams):
            return sparse_vector(prepared, outputs)
        target_ids: np.ndarray | None = prepared.state
        input_ids = prepared.sequences[0].input_ids
        logits = np.asarray(outputs[0]["logits"])  # (T, vocab)
        masked_index = np.nonzero(input_ids == ctx.mask_token_id)[0]
        probs = base.softmax(logits[masked_index].astype(np.float32))  # (masks, vocab)
        if target_ids is not None:
            probs = probs[..., target_ids]
        top_k = min(params.top_k, probs.shape[-1])
        single_mask = len(masked_index) == 1
        results = []
        for mask_position, mask_probs in zip(masked_index, probs, strict=True):
            row = []
            for choice in top_indices(mask_probs, top_k):
                token_id = int(target_ids[choice]) if target_ids is not None else int(choice)
                tokens = input_ids.copy()
                tokens[mask_position] = token_id
                tokens = tokens[tokens != ctx.pad_token_id]
                row.append(
                    {
                        "score": float(mask_probs[choice]),
                        "token": token_id,
                        "token_str": self.decode(ctx, [token_id], skip_special_tokens=False),
                        "sequence": self.decode(ctx, tokens, skip_special_tokens=single_mask),
                    }
                )
            results.append(row)
        return results


class FillMaskRequest(TaskRequest):
    model_config = examples(
        {"inputs": "Paris is the [MASK] of France."},
        {"model": "mlm", "inputs": ["The movie was [MASK]."], "top_k": 3, "targets": ["good", "bad"]},
    )
    task: ClassVar[str] = "fill-mask"

    inputs: str | Annotated[list[str], Field(min_length=1)] = Field(
        description="A text with one or more mask tokens, or a list of them."
    )
    top_k: int = Field(DEFAULTS["top_k"], ge=1, le=MAX_TOP_K, description="Predictions per mask.")
    targets: Annotated[list[str], Field(min_length=1)] | None = Field(
        None, description="Only score these words (as transformers' targets)."
    )

    def input_list(self) -> list[str]:
        return self.inputs if isinstance(self.inputs, list) else [self.inputs]

    def to_task(self) -> tuple[list[Any], FillMaskParams]:
        targets = tuple(self.targets) if self.targets is not None else None
        return list(self.input_list()), base.params_from(self, FillMaskParams, targets=targets)


class FillMaskPrediction(BaseModel):
    score: float
    token: int = Field(description="Vocabulary id of the predicted token.")
    token_str: str
    sequence: str = Field(description="The input with this token in the mask's place.")


class FillMaskResponse(BaseModel):
    model_config = examples(
        {
            "model": "mlm",
            "results": [
                [
                    [
                        {
                            "score": 0.41,
                            "token": 3007,
                            "token_str": "capital",
                            "sequence": "paris is the capital of france.",
                        }
                    ]
                ]
            ],
        },
    )

    model: str
    results: list[list[list[FillMaskPrediction]]] = Field(
        description="Per input (always a list), per mask position (always a list), predictions best first."
    )


def hf_answer(request: FillMaskRequest, results: list[Any], single: bool) -> Any:
    """The pipeline's answer: an input with one mask answers its candidates, not a list of one."""
    return base.pipeline_answer(request, [result[0] if len(result) == 1 else result for result in results], single)


OIP = oip.texts_with_list(FillMaskRequest, "targets", "predictions", options=("top_k",))


UNIT = TaskUnit(
    "fill-mask",
    FillMaskHandler(),
    V1Route(
        FillMaskRequest,
        FillMaskResponse,
        "Predict the tokens behind mask tokens (transformers' fill-mask pipeline semantics).",
    ),
    HfMapping(FillMaskRequest, answer=hf_answer),
    oip=OIP,
)
