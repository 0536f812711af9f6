"""Batch shapes padded up to buckets (service/shape_buckets.py): the series, the padding, the shapes warm-up runs,
and answers that do not change when a real session runs padded batches."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from contract.bundle import read_bundle
from contract.onnx_io import PaddedRows, pad_rows
from contract.tasks import task_spec
from service import engine_load
from service.batch_rows import MAX_TOKEN_OUTPUT_BYTES
from service.device import CPU, Device
from service.engine import Engine
from service.engine_load import load_context, shape_buckets
from service.sessions import OrtRunner
from service.settings import Settings
from service.shape_buckets import MIN_TOKENS, ShapeBuckets, bucket_series, bucket_size
from service.tasks import ClassificationParams, TokenClassificationParams
from tests.service.tiny_models import SERVED_TASKS, TinyModel

PAD = 7


def test_a_bucket_is_the_next_of_the_series_and_at_most_one_and_a_half_times_the_count() -> None:
    series = bucket_series(5000)
    assert series[:12] == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
    for count in range(1, 5000):
        size = bucket_size(count)
        assert size in series and count <= size <= 1.5 * count
        assert all(smaller < count for smaller in series if smaller < size)  # the smallest that holds it
    assert bucket_size(3, MIN_TOKENS) == 16 and bucket_size(17, MIN_TOKENS) == 24


def test_tokens_never_pass_the_models_longest_input() -> None:
    buckets = ShapeBuckets(PAD, max_tokens=100)
    assert buckets.shape(5, 3) == (6, 16)
    assert buckets.shape(1, 97) == (1, 100)  # 128 would pass the position embeddings
    assert buckets.shape(33, 100) == (48, 100)
    assert ShapeBuckets(PAD, max_tokens=10).shape(1, 9) == (1, 10)


def test_padding_keeps_the_rows_and_adds_only_masked_tokens_and_copies_of_the_last_row() -> None:
    batch = pad_rows([([1, 5, 6, 2], [0, 0, 1, 1]), ([1, 9, 2], [0, 0, 0]), ([1, 4, 4, 4, 2], [0, 1, 1, 1, 1])], PAD)
    grown = ShapeBuckets(PAD, max_tokens=64).pad(batch.feeds)
    assert grown["input_ids"].shape == grown["attention_mask"].shape == grown["token_type_ids"].shape == (3, 16)
    for name, array in batch.feeds.items():
        np.testing.assert_array_equal(grown[name][:, :5], array)
    assert (grown["input_ids"][:, 5:] == PAD).all() and (grown["attention_mask"][:, 5:] == 0).all()
    four = pad_rows([([1, 5, 2], [0, 0, 0])] * 2 + [([1, 6, 6, 2], [0, 1, 1, 1])] * 3, PAD)
    rows = ShapeBuckets(PAD, max_tokens=64).pad(four.feeds)
    assert rows["input_ids"].shape == (6, 16)
    for name, array in four.feeds.items():
        np.testing.assert_array_equal(rows[name][5, :4], array[4])  # a new row repeats the last real one
    exact = pad_rows([([1] * 16, [0] * 16)] * 4, PAD)
    assert ShapeBuckets(PAD, max_tokens=64).pad(exact.feeds) is exact.feeds


def test_the_warm_up_shapes_hold_every_batch_the_limits_allow() -> None:
    buckets = ShapeBuckets(PAD, max_tokens=64)
    shapes = buckets.shapes(max_rows=20, max_batch_tokens=300)
    assert len(set(shapes)) == len(shapes)
    areas = [rows * tokens for rows, tokens in shapes]
    assert areas == sorted(areas)
    needed = {buckets.shape(rows, tokens) for rows in range(1, 21) for tokens in range(1, 65)
              if rows * tokens <= 300 or rows == 1}  # fmt: skip
    assert needed <= set(shapes)
    assert max(rows for rows, _ in shapes) == 24 and (24, 16) in shapes and (1, 64) in shapes


def spy_on_runs(runner: OrtRunner) -> list[tuple[int, ...]]:
    """The shapes ``runner``'s session runs from now on (after any padding to buckets)."""
    seen: list[tuple[int, ...]] = []
    run_feeds = runner._run_feeds

    def recording(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        seen.append(feeds["input_ids"].shape)
        return run_feeds(feeds)

    runner._run_feeds = recording  # type: ignore[method-assign]
    return seen


class Recorder:
    output_names = ("logits",)

    def __init__(self) -> None:
        self.shapes: list[tuple[int, int]] = []

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]:
        self.shapes.append(batch.input_ids.shape)
        assert batch.lengths == [batch.input_ids.shape[1]] * batch.input_ids.shape[0]
        return {"logits": np.zeros((batch.input_ids.shape[0], 2), dtype=np.float32)}


def test_warm_up_runs_each_shape_once_smallest_first_within_its_time() -> None:
    buckets = ShapeBuckets(PAD, max_tokens=64)
    runner = Recorder()
    assert buckets.warm_up(runner, 1, 2, max_rows=8, max_batch_tokens=256) == (len(runner.shapes), len(runner.shapes))
    assert runner.shapes == buckets.shapes(8, 256)
    late = Recorder()
    assert buckets.warm_up(late, 1, 2, max_rows=8, max_batch_tokens=256, seconds=-1.0) == (0, len(runner.shapes))
    assert late.shapes == []


def test_buckets_are_on_by_default_on_a_gpu_only(text_classification_model: TinyModel) -> None:
    context = load_context(read_bundle(text_classification_model.bundle))
    assert shape_buckets(Settings(), CPU, context) is None
    on_gpu = shape_buckets(Settings(), Device("cuda", 0), context)
    assert on_gpu == ShapeBuckets(context.pad_token_id, context.max_length)
    assert shape_buckets(Settings(shape_buckets=False), Device("cuda", 0), context) is None
    assert shape_buckets(Settings(shape_buckets=True), CPU, context) == on_gpu


@pytest.mark.parametrize("task", SERVED_TASKS)
def test_a_padded_batch_gives_each_real_row_the_same_outputs(tiny_models: dict[str, TinyModel], task: str) -> None:
    bundle = read_bundle(tiny_models[task].bundle)
    context = load_context(bundle)
    outputs, path = tuple(bundle.spec.outputs), bundle.model_path
    exact = OrtRunner(path, outputs, intra_op_threads=1)
    padded = OrtRunner(path, outputs, intra_op_threads=1, buckets=ShapeBuckets(context.pad_token_id, 128))
    ran = spy_on_runs(padded)
    rng = np.random.default_rng(0)
    rows = [(rng.integers(5, 200, size=length), np.zeros(length, dtype=np.int64)) for length in (9, 21, 5, 17, 13)]
    batch = pad_rows(rows, context.pad_token_id)
    want, got = exact.run(batch), padded.run(batch)
    assert ran == [(6, 24)]
    token_level = task_spec(bundle.spec.task).token_level
    for name in outputs:
        assert got[name].shape[0] == 5
        for row, length in enumerate(batch.lengths):
            cut = slice(None, length) if name in token_level else slice(None)
            np.testing.assert_allclose(got[name][row][cut], want[name][row][cut], atol=2e-5, rtol=1e-4)


def test_an_engine_on_a_gpu_runs_every_bucket_before_it_serves(text_classification_model: TinyModel) -> None:
    limits = Settings(max_batch_size=8, max_batch_tokens=512, intra_op_threads=1, model_workers=1, shape_buckets=True)
    shown: dict[str, list[tuple[int, ...]]] = {}
    answers: dict[str, list] = {}
    for device in ("cpu", "gpu"):
        engine = Engine.from_bundle(text_classification_model.bundle, limits)
        if device == "gpu":  # where the session runs is all the warm-up reads; a CPU session stands in for it
            engine.device = Device("cuda", 0)
        runner = engine.lane.runner
        assert isinstance(runner, OrtRunner) and runner.buckets is not None
        seen = spy_on_runs(runner)

        async def main(engine: Engine = engine) -> list:
            await engine.start()
            got = await engine.infer(
                ["a wonderful movie", "john smith lived in paris"], ClassificationParams(top_k=None)
            )
            await engine.stop()
            return got

        answers[device] = asyncio.run(main())
        shown[device] = seen
    buckets = ShapeBuckets(engine.context.pad_token_id, 128)
    warm = buckets.shapes(8, 512)
    assert shown["gpu"][1 : 1 + len(warm)] == warm  # after the first warm-up batch, before the rate probe
    assert len(shown["cpu"]) == len(shown["gpu"]) - len(warm)  # a CPU session is not warmed
    assert answers["cpu"] == answers["gpu"]
    assert engine.info.batching["shape_buckets"] is True  # /v1/models says so
    assert all(buckets.shape(*shape) == shape for shape in shown["cpu"])  # every batch ran at a bucket's shape


def test_served_answers_do_not_change_with_buckets(tiny_models: dict[str, TinyModel]) -> None:
    texts = ["a wonderful movie", "john smith lived in paris and worked for google in london", "bad", "mary"] * 3
    tokens = TokenClassificationParams(aggregation_strategy="none", ignore_labels=())
    cases = [("text-classification", ClassificationParams(top_k=None)), ("token-classification", tokens)]
    for task, params in cases:
        got = {}
        for on in (False, True):
            engine = Engine.from_bundle(tiny_models[task].bundle, Settings(shape_buckets=on, model_workers=1))

            async def main(engine: Engine = engine, params: object = params) -> list:
                await engine.start()
                together = await asyncio.gather(*(engine.infer([text], params) for text in texts))
                await engine.stop()
                return [result[0] for result in together]

            got[on] = asyncio.run(main())
        for plain, padded in zip(got[False], got[True], strict=True):
            assert [{k: v for k, v in item.items() if k != "score"} for item in plain] == [
                {k: v for k, v in item.items() if k != "score"} for item in padded
            ]
            np.testing.assert_allclose([item["score"] for item in plain], [item["score"] for item in padded], atol=1e-5)


class BuiltRunner(Recorder):
    """Stands in for a session ``load_model`` builds (a CUDA one cannot be built here): records what runs on it."""

    def __init__(self, *args: object, buckets: ShapeBuckets | None = None) -> None:
        super().__init__()
        self.buckets = args[5] if len(args) > 5 else buckets


@pytest.mark.parametrize("device", [Device("cuda", 0), CPU])
def test_a_replacement_session_on_a_gpu_runs_every_bucket_before_it_serves(
    text_classification_model: TinyModel, monkeypatch: pytest.MonkeyPatch, device: Device
) -> None:
    monkeypatch.setattr(engine_load, "OrtRunner", BuiltRunner)
    settings = Settings(tune=False, max_batch_size=8, max_batch_tokens=512, shape_buckets=True)
    got = engine_load.load_model(text_classification_model.bundle, settings, device=device)
    assert isinstance(got.runner, BuiltRunner) and got.runner.shapes == []  # the engine's start warms this one
    replacement = got.fresh()
    assert isinstance(replacement, BuiltRunner)
    warm = ShapeBuckets(got.context.pad_token_id, 128).shapes(8, 512)
    assert replacement.shapes == (warm if device.is_cuda else [])


def test_a_bucket_past_the_output_cap_runs_the_batch_as_it_is() -> None:
    capped = ShapeBuckets(PAD, max_tokens=64, max_padded_tokens=50)
    three = pad_rows([([1, 5, 6, 7, 2], [0] * 5)] * 3, PAD)
    assert capped.pad(three.feeds)["input_ids"].shape == (3, 16)  # 48 padded tokens: within the cap
    five = pad_rows([([1, 5, 6, 7, 2], [0] * 5)] * 5, PAD)
    assert capped.pad(five.feeds) is five.feeds  # (6, 16) would pass it
    assert all(rows * tokens <= 50 for rows, tokens in capped.shapes(8, 512))
    assert (3, 16) in capped.shapes(8, 512) and (6, 16) not in capped.shapes(8, 512)


def test_a_runner_with_vocabulary_wide_outputs_caps_its_buckets(tiny_models: dict[str, TinyModel]) -> None:
    settings = Settings(tune=False, shape_buckets=True)
    got = engine_load.load_model(tiny_models["fill-mask"].bundle, settings, device=CPU)
    runner = got.runner
    vocab = got.context.tokenizer.get_vocab_size()
    assert isinstance(runner, OrtRunner) and runner.buckets is not None
    assert runner.buckets.max_padded_tokens == MAX_TOKEN_OUTPUT_BYTES // (4 * vocab)
    replacement = got.fresh()
    assert isinstance(replacement, OrtRunner) and replacement.buckets == runner.buckets
    classifier = engine_load.load_model(tiny_models["text-classification"].bundle, settings, device=CPU)
    plain = classifier.runner
    assert isinstance(plain, OrtRunner)
    assert plain.buckets == ShapeBuckets(classifier.context.pad_token_id, 128)  # (B, labels) outputs: no cap
