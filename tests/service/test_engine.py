from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from contract.bundle import BundleError, BundleSpec, write_spec
from service import sessions
from service.batch_rows import MAX_TOKEN_OUTPUT_BYTES, batch_policy
from service.engine import Engine
from service.errors import BadRequest, NotReady
from service.prepare_stage import input_chars
from service.settings import Settings, available_cpus
from service.tasks import ClassificationParams, QAInput, TokenClassificationParams
from tests.service.apptools import GatedRunner
from tests.service.tiny_models import CLASSIFICATION_LABELS, TinyModel

TEXTS = [
    "a wonderful movie",
    "john smith lived in paris and worked for google in london for ten years",
    "bad",
    "the plot was boring but the music was great and the actors were good",
    "mary",
]


def settings(**overrides: object) -> Settings:
    values: dict[str, object] = {"max_wait_ms": 1.0, "intra_op_threads": 1, "model_workers": 1, "prepare_threads": 2}
    return Settings(**{**values, **overrides})  # type: ignore[arg-type]


def test_from_bundle_describes_the_model(text_classification_model: TinyModel) -> None:
    engine = Engine.from_bundle(text_classification_model.bundle, settings(), name="sst")
    info = engine.info
    assert (info.name, info.task, info.labels) == ("sst", "text-classification", CLASSIFICATION_LABELS)
    assert info.max_length == engine.context.max_length == 128 and info.quantization == "none"
    ctx = engine.context
    assert ctx.tokenizer.token_to_id("[MASK]") == ctx.mask_token_id
    assert ctx.tokenizer.token_to_id("[PAD]") == ctx.pad_token_id
    assert ctx.tokenizer.encode("movie").ids[0] == ctx.cls_token_id
    assert ctx.tokenizer.padding is None and ctx.tokenizer.truncation is None


@pytest.mark.parametrize(
    ("task", "params", "inline_chars"),
    [
        ("text-classification", ClassificationParams(top_k=None), 0),
        ("token-classification", TokenClassificationParams(aggregation_strategy="none", ignore_labels=()), 10_000),
    ],
)
def test_concurrent_batched_answers_equal_one_at_a_time_answers(
    tiny_models: dict[str, TinyModel], task: str, params: object, inline_chars: int
) -> None:
    engine = Engine.from_bundle(tiny_models[task].bundle, settings(max_batch_size=8, prepare_inline_chars=inline_chars))

    async def main() -> tuple[list, list]:
        await engine.start()
        alone = [(await engine.infer([text], params))[0] for text in TEXTS]
        together = await asyncio.gather(*(engine.infer([text], params) for text in TEXTS * 4))
        one_request = await engine.infer(TEXTS, params)
        await engine.stop()
        return alone, [result[0] for result in together] + one_request

    alone, batched = asyncio.run(main())
    for got, expected in zip(batched, alone * 5, strict=True):
        assert [{k: v for k, v in item.items() if k != "score"} for item in got] == [
            {k: v for k, v in item.items() if k != "score"} for item in expected
        ]
        np.testing.assert_allclose([item["score"] for item in got], [item["score"] for item in expected], atol=1e-5)


def test_fill_mask_token_budget_keeps_vocabulary_logits_bounded(tiny_models: dict[str, TinyModel]) -> None:
    budget = batch_policy(settings(max_batch_tokens=8192), floats_per_token=30522).max_batch_tokens
    assert budget * 30522 * 4 <= MAX_TOKEN_OUTPUT_BYTES < (budget + 1) * 30522 * 4
    fill = Engine.from_bundle(tiny_models["fill-mask"].bundle, settings(max_batch_tokens=8192))
    vocab = fill.context.tokenizer.get_vocab_size()
    assert fill.batcher.policy.max_batch_tokens == min(8192, MAX_TOKEN_OUTPUT_BYTES // (4 * vocab))
    text = Engine.from_bundle(tiny_models["text-classification"].bundle, settings(max_batch_tokens=8192))
    assert text.batcher.policy.max_batch_tokens == 8192


def test_input_chars_counts_text_in_every_input_kind() -> None:
    assert input_chars(["abc", ("ab", "c"), QAInput(question="q?", context="context")]) == 3 + 3 + 9


def test_input_errors_are_bad_requests(text_classification_model: TinyModel) -> None:
    engine = Engine.from_bundle(text_classification_model.bundle, settings())

    async def main() -> None:
        await engine.start()
        try:
            with pytest.raises(BadRequest):
                await engine.infer(["   "], ClassificationParams())
            with pytest.raises(BadRequest):
                await engine.infer(["fine"], ClassificationParams(function_to_apply="cube"))
        finally:
            await engine.stop()

    asyncio.run(main())


def test_stop_drains_in_flight_requests_then_refuses(text_classification_model: TinyModel) -> None:
    engine = Engine.from_bundle(text_classification_model.bundle, settings())

    async def main() -> None:
        await engine.start()
        in_flight = [asyncio.ensure_future(engine.infer([text], ClassificationParams())) for text in TEXTS]
        await asyncio.sleep(0.05)  # the requests are tokenized and queued
        await engine.stop(drain=True)
        results = await asyncio.gather(*in_flight)
        assert all(len(result) == 1 and result[0][0]["label"] in CLASSIFICATION_LABELS for result in results)
        assert not engine.ready and not any(worker.alive for worker in engine.workers)
        with pytest.raises(NotReady):
            await engine.infer(["late"], ClassificationParams())

    asyncio.run(main())


def copy_bundle(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def rewrite_spec(folder: Path, **changes: object) -> None:
    data = json.loads((folder / "bundle.json").read_text())
    data.update(changes)
    write_spec(folder, BundleSpec.from_json(data, folder))


def test_bad_bundles_raise_bundle_errors_naming_the_folder(
    text_classification_model: TinyModel, tmp_path: Path
) -> None:
    source = text_classification_model.bundle
    tampered = copy_bundle(source, tmp_path / "tampered")
    with (tampered / "model.onnx").open("ab") as handle:
        handle.write(b"junk")
    garbage = copy_bundle(source, tmp_path / "garbage")
    (garbage / "model.onnx").write_bytes(b"not an onnx model")
    rewrite_spec(garbage)
    no_mask = copy_bundle(source, tmp_path / "no-mask")
    rewrite_spec(no_mask, special_tokens={"mask_token": "[NOPE]"})
    no_tokenizer = copy_bundle(source, tmp_path / "no-tokenizer")
    (no_tokenizer / "tokenizer.json").unlink()
    cases = {tampered: "hash", garbage: "model.onnx cannot be loaded", no_mask: "[NOPE]", no_tokenizer: "tokenizer"}
    for folder, problem in cases.items():
        with pytest.raises(BundleError) as caught:
            Engine.from_bundle(folder, settings())
        assert str(folder) in str(caught.value) and problem in str(caught.value)


def test_two_workers_run_batches_at_once_on_one_session(
    text_classification_model: TinyModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[object] = []
    real_session = sessions.ort_session

    def counting_session(*args: object, **kwargs: object) -> object:
        opened.append(args[0])
        return real_session(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sessions, "ort_session", counting_session)
    engine = Engine.from_bundle(text_classification_model.bundle, settings(model_workers=2, max_batch_size=1))
    assert len(opened) == 1, "one graph load per model, whatever the worker count"
    first, second = engine.workers
    assert first.runner is second.runner is engine.pool.runner
    assert engine.info.batching["workers"] == 2 and engine.info.batching["parallel_runs"] == 2
    gate = threading.Event()
    gated = [GatedRunner(worker.runner, gate) for worker in engine.workers]
    for worker, runner in zip(engine.workers, gated, strict=True):
        worker.runner = runner
    params = ClassificationParams(top_k=None)

    async def main() -> tuple[list, list]:
        gate.set()
        await engine.start()
        alone = [(await engine.infer([text], params))[0] for text in TEXTS[:2]]
        gate.clear()
        for runner in gated:
            runner.entered.clear()
        together = asyncio.gather(*(engine.infer([text], params) for text in TEXTS[:2]))
        deadline = time.monotonic() + 5
        while not all(runner.entered.is_set() for runner in gated):  # one row per batch: each worker holds one
            assert time.monotonic() < deadline, "the two batches did not run at the same time"
            await asyncio.sleep(0.005)
        gate.set()
        answers = [result[0] for result in await together]
        await engine.stop()
        return alone, answers

    alone, answers = asyncio.run(main())
    for got, expected in zip(answers, alone, strict=True):
        assert [item["label"] for item in got] == [item["label"] for item in expected]
        np.testing.assert_allclose([item["score"] for item in got], [item["score"] for item in expected], atol=1e-5)


def test_by_default_a_lone_batch_runs_on_every_core(text_classification_model: TinyModel) -> None:
    engine = Engine.from_bundle(text_classification_model.bundle, Settings(tune=False))  # type: ignore[call-arg]
    options = engine.pool.runner.session.get_session_options()  # type: ignore[attr-defined]
    assert options.intra_op_num_threads == available_cpus()
    assert engine.info.batching["parallel_runs"] == (1 if available_cpus() > 1 else len(engine.workers))


def test_one_parallel_run_lets_the_second_worker_wait_for_the_first(text_classification_model: TinyModel) -> None:
    engine = Engine.from_bundle(
        text_classification_model.bundle, settings(model_workers=2, max_batch_size=1, parallel_runs=1)
    )
    assert engine.info.batching["workers"] == 2 and engine.info.batching["parallel_runs"] == 1
    gate = threading.Event()
    gated = GatedRunner(engine.pool.runner, gate)
    for worker in engine.workers:
        worker.runner = gated
    params = ClassificationParams(top_k=None)

    async def main() -> tuple[int, list]:
        gate.set()
        await engine.start()
        gate.clear()
        gated.seen.clear()
        gated.entered.clear()
        together = asyncio.gather(*(engine.infer([text], params) for text in TEXTS[:2]))
        deadline = time.monotonic() + 5
        while not gated.entered.is_set():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.3)  # time for the other worker to run the second batch, were it allowed to
        running = len(gated.seen)
        gate.set()
        answers = await together
        await engine.stop()
        return running, answers

    running, answers = asyncio.run(main())
    assert running == 1, "the second batch ran while the first held the run gate"
    assert len(answers) == 2 and len(gated.seen) == 2


class FirstCallSlow:
    """A real runner whose first call takes ``first_s`` longer (a slow machine's set-up of a fresh session)."""

    def __init__(self, inner: object, first_s: float) -> None:
        self.inner, self.first_s, self.calls = inner, first_s, 0
        self.output_names = inner.output_names  # type: ignore[attr-defined]

    def run(self, batch):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.first_s)
        return self.inner.run(batch)  # type: ignore[attr-defined]


def test_a_short_request_timeout_does_not_fail_a_slow_warm_up(text_classification_model: TinyModel) -> None:
    engine = Engine.from_bundle(text_classification_model.bundle, settings(timeout_s=0.3))
    slow = FirstCallSlow(engine.pool.runner, first_s=0.6)
    for worker in engine.workers:
        worker.runner = slow

    async def main() -> bool:
        await engine.start()
        ready = engine.ready
        await engine.stop()
        return ready

    assert asyncio.run(main()) and slow.calls >= 2  # warmed up past the request timeout, then the rate probe ran
