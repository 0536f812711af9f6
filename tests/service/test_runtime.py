from __future__ import annotations

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from contract.onnx_io import pad_token_rows
from contract.tasks import TASKS
from service.runtime import split_rows
from service.sessions import OrtRunner, token_output_width
from tests.service.fakes import seq
from tests.service.tiny_models import TinyModel


def test_pad_rows_pads_ids_masks_and_types() -> None:
    rows = [seq([5, 6, 7]), seq([8])]
    rows[0].token_type_ids[2] = 1
    batch = pad_token_rows(rows, pad_token_id=0)
    np.testing.assert_array_equal(batch.input_ids, [[5, 6, 7], [8, 0, 0]])
    np.testing.assert_array_equal(batch.attention_mask, [[1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(batch.token_type_ids, [[0, 0, 1], [0, 0, 0]])
    assert batch.input_ids.dtype == np.int64 and batch.lengths == [3, 1]


def test_split_rows_cuts_token_level_outputs_only() -> None:
    # 3 rows padded to 3 tokens, and a sequence-level output whose width happens to equal T.
    token = np.arange(3 * 3 * 2).reshape(3, 3, 2)
    pooled = np.arange(9).reshape(3, 3)
    rows = split_rows({"logits": token, "pooled": pooled}, [3, 1, 2], frozenset({"logits"}))
    assert [row["logits"].shape for row in rows] == [(3, 2), (1, 2), (2, 2)]
    np.testing.assert_array_equal(rows[2]["logits"], token[2, :2])
    assert all(row["pooled"].shape == (3,) for row in rows)


def test_token_level_table_covers_every_bundle_task() -> None:
    for spec in TASKS.values():
        outputs = spec.outputs + spec.optional_outputs
        assert spec.token_level <= set(outputs)
        axes = spec.dynamic_axes(outputs=outputs)
        assert all((1 in axes[name]) == spec.is_token_level(name) for name in outputs)


def test_token_output_width_reads_the_graph_shapes(tiny_models: dict[str, TinyModel]) -> None:
    widths = {}
    for task in ("fill-mask", "token-classification", "text-classification"):
        runner = OrtRunner(tiny_models[task].bundle / "model.onnx", TASKS[task].outputs, intra_op_threads=1)
        widths[task] = token_output_width(runner, TASKS[task].token_level)
    vocabulary = Tokenizer.from_file(str(tiny_models["fill-mask"].bundle / "tokenizer.json")).get_vocab_size()
    assert widths == {"fill-mask": vocabulary, "token-classification": 9, "text-classification": 0}


def test_padded_batch_outputs_match_each_row_run_alone(tiny_models: dict[str, TinyModel]) -> None:
    rng = np.random.default_rng(0)
    for task in ("token-classification", "text-classification", "question-answering"):
        bundle = tiny_models[task].bundle
        outputs = TASKS[task].outputs
        runner = OrtRunner(bundle / "model.onnx", outputs, intra_op_threads=1)
        rows = [seq([2, *rng.integers(10, 300, size=n).tolist(), 3]) for n in (1, 17, 5, 30)]
        batched = split_rows(runner.run(pad_token_rows(rows, 0)), [len(r) for r in rows], TASKS[task].token_level)
        for row, got in zip(rows, batched, strict=True):
            alone = runner.run(pad_token_rows([row], 0))
            for name in outputs:
                expected = alone[name][0]
                assert got[name].shape == expected.shape
                np.testing.assert_allclose(got[name], expected, atol=1e-4, rtol=1e-4)


def test_ort_runner_session_settings(tiny_models: dict[str, TinyModel]) -> None:
    bundle = tiny_models["text-classification"].bundle
    runner = OrtRunner(bundle / "model.onnx", ("logits",), intra_op_threads=2)
    options = runner.session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
