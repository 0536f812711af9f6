"""The embeddings handler on its own: tokenization and truncation, and how the graph's vector is shaped."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from service.tasks import EmbeddingParams, FeatureExtractionHandler, InputError, ModelContext
from tests.service.tasks.conftest import MAX_LENGTH, model_context

HANDLER = FeatureExtractionHandler()
LONG = "the movie was wonderful and the music was beautiful " * 20  # ~180 tokens, over MAX_LENGTH


@pytest.fixture(scope="module")
def ctx(tokenizer_dir: Path) -> ModelContext:
    return model_context(tokenizer_dir, SimpleNamespace(id2label={}, problem_type=None))


def graph_output(vector: list[float]) -> list[dict[str, np.ndarray]]:
    return [{"sentence_embedding": np.asarray(vector, dtype=np.float32)}]


def test_one_row_per_text_truncated_to_the_model(ctx: ModelContext) -> None:
    prepared = HANDLER.prepare(ctx, ["John lives in Paris.", LONG], EmbeddingParams())
    assert [len(item.sequences) for item in prepared] == [1, 1]
    short, long = (item.sequences[0] for item in prepared)
    assert short.input_ids[0] == ctx.cls_token_id and short.input_ids[-1] == ctx.sep_token_id
    assert len(long) == MAX_LENGTH
    left = HANDLER.prepare(ctx, [LONG + " john"], EmbeddingParams(truncation_direction="Left"))[0].sequences[0]
    assert len(left) == MAX_LENGTH and left.input_ids[-2] == ctx.tokenizer.encode("john").ids[-2]  # the end is kept
    assert not np.array_equal(left.input_ids, long.input_ids)


@pytest.mark.parametrize("text", ["", "  \t "])
def test_an_empty_text_is_refused_as_every_task_refuses_it(ctx: ModelContext, text: str) -> None:
    with pytest.raises(InputError, match="input 1 is empty"):
        HANDLER.prepare(ctx, ["fine", text], EmbeddingParams())


def test_without_truncation_a_long_text_is_refused(ctx: ModelContext) -> None:
    tokens = len(ctx.tokenizer.encode(LONG).ids)
    with pytest.raises(InputError, match=f"input 1 is {tokens} tokens long; the model takes at most {MAX_LENGTH}"):
        HANDLER.prepare(ctx, ["fine", LONG], EmbeddingParams(truncate=False))
    fits = HANDLER.prepare(ctx, ["fine"], EmbeddingParams(truncate=False))[0].sequences[0]
    assert len(fits) == len(ctx.tokenizer.encode("fine").ids)


@pytest.mark.parametrize(
    ("params", "inputs", "message"),
    [
        (EmbeddingParams(dimensions=0), ["x"], "dimensions must be an integer >= 1"),
        (EmbeddingParams(truncation_direction="middle"), ["x"], "truncation_direction must be one of"),
        (EmbeddingParams(), ["x", 3], "input 1 must be a string"),
    ],
)
def test_bad_parameters_are_input_errors(ctx: ModelContext, params: EmbeddingParams, inputs: list, message: str):
    with pytest.raises(InputError, match=message):
        HANDLER.prepare(ctx, inputs, params)


def test_a_normalising_graph_s_vector_is_kept_and_a_cut_is_renormalised(ctx: ModelContext) -> None:
    ctx = dataclasses.replace(ctx, embedding_normalized=True)
    prepared = HANDLER.prepare(ctx, ["John lives in Paris."], EmbeddingParams())[0]
    unit = np.array([0.6, 0.0, 0.8, 0.0], dtype=np.float32)
    result = HANDLER.postprocess(ctx, prepared, graph_output(unit), EmbeddingParams())
    np.testing.assert_array_equal(result.vector, unit)
    assert result.tokens == len(prepared.sequences[0])
    cut = HANDLER.postprocess(ctx, prepared, graph_output(unit), EmbeddingParams(dimensions=2)).vector
    np.testing.assert_allclose(cut, [1.0, 0.0], atol=1e-7)
    kept = HANDLER.postprocess(ctx, prepared, graph_output(unit), EmbeddingParams(dimensions=2, normalize=False))
    np.testing.assert_array_equal(kept.vector, unit[:2])
    with pytest.raises(InputError, match="dimensions 5 is more than the model's 4"):
        HANDLER.postprocess(ctx, prepared, graph_output(unit), EmbeddingParams(dimensions=5))


def test_a_raw_graph_s_vector_is_normalised_only_when_asked(ctx: ModelContext) -> None:
    prepared = HANDLER.prepare(ctx, ["John lives in Paris."], EmbeddingParams())[0]
    raw = np.array([3.0, 4.0, 0.0], dtype=np.float32)
    np.testing.assert_array_equal(HANDLER.postprocess(ctx, prepared, graph_output(raw), EmbeddingParams()).vector, raw)
    unit = HANDLER.postprocess(ctx, prepared, graph_output(raw), EmbeddingParams(normalize=True)).vector
    np.testing.assert_allclose(unit, [0.6, 0.8, 0.0], atol=1e-7)
    assert unit.dtype == np.float32
    first = HANDLER.postprocess(ctx, prepared, graph_output(raw), EmbeddingParams(dimensions=1)).vector
    np.testing.assert_array_equal(first, [3.0])
    zero = HANDLER.postprocess(ctx, prepared, graph_output([0.0, 0.0]), EmbeddingParams(normalize=True)).vector
    assert np.isfinite(zero).all()
