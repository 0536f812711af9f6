"""A small model's split threads (service.sessions.SplitRunner): a batch alone on every thread, batches side by side
on one thread each, the two kinds never at once; answers as on one session; chosen by tuning for small models only.
And where a run's threads spin between its operators: on the session batches run on alone (tuning decides)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from contract.onnx_io import PaddedRows, pad_token_rows
from service.engine import Engine
from service.sessions import OrtRunner, SplitRunner
from service.settings import Settings
from service.tasks import ClassificationParams
from service.tuning import BatchingChoice, Tuner
from tests.service.fakes import seq
from tests.service.tiny_models import TinyModel


class Recorder:
    """Shared by two fake sessions: which kinds of run overlapped."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: list[str] = []
        self.overlaps: list[tuple[str, ...]] = []  # what ran at each run's start, itself included
        self.kinds: list[str] = []


class FakeSession:
    output_names = ("logits",)
    device = None

    def __init__(self, kind: str, recorder: Recorder, seconds: float = 0.01) -> None:
        self.kind, self.recorder, self.seconds = kind, recorder, seconds
        self.output_shapes = {"logits": ["batch", 2]}

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]:
        with self.recorder.lock:
            self.recorder.running.append(self.kind)
            self.recorder.overlaps.append(tuple(self.recorder.running))
            self.recorder.kinds.append(self.kind)
        time.sleep(self.seconds)
        with self.recorder.lock:
            self.recorder.running.remove(self.kind)
        return {"logits": np.zeros((batch.input_ids.shape[0], 2), dtype=np.float32)}


def config_entry(options: ort.SessionOptions, key: str) -> str | None:
    try:
        return options.get_session_config_entry(key)
    except RuntimeError:  # not set
        return None


def split_fakes() -> tuple[SplitRunner, Recorder]:
    recorder = Recorder()
    runner = SplitRunner(FakeSession("all", recorder), FakeSession("one", recorder), None)  # type: ignore[arg-type]
    return runner, recorder


def test_a_lone_batch_gets_every_core_and_one_with_rows_behind_it_one_thread() -> None:
    runner, recorder = split_fakes()
    batch = pad_token_rows([seq([2, 5, 3])], 0)
    runner.run(batch, backlog=0)
    runner.run(batch, backlog=3)
    assert recorder.kinds == ["all", "one"]


def test_runs_on_every_core_never_overlap_another_run_and_one_thread_runs_go_side_by_side() -> None:
    runner, recorder = split_fakes()
    batch = pad_token_rows([seq([2, 5, 3])], 0)
    rng = np.random.default_rng(0)
    plans = [
        list(zip(rng.uniform(0, 0.03, 12).tolist(), rng.integers(0, 2, 12).tolist(), strict=True)) for _ in range(4)
    ]

    def client(plan: list[tuple[float, int]]) -> None:
        for gap, backlog in plan:
            time.sleep(gap)
            runner.run(batch, backlog)

    runner.run(batch, backlog=0)  # alone: every core
    threads = [threading.Thread(target=client, args=(plan,)) for plan in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(recorder.kinds) == 49 and {"all", "one"} <= set(recorder.kinds)
    assert all(overlap == ("all",) for overlap in recorder.overlaps if "all" in overlap)
    assert max(len(overlap) for overlap in recorder.overlaps) >= 2  # one-thread runs did run together


def test_a_split_engine_answers_as_one_session_alone_and_under_concurrent_load(
    text_classification_model: TinyModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {"max_wait_ms": 0.0, "intra_op_threads": 2, "model_workers": 2, "split_threads": True, "max_batch_size": 2}
    engine = Engine.from_bundle(text_classification_model.bundle, Settings(**values))  # type: ignore[arg-type]
    one_session = Settings(**{**values, "split_threads": False})  # type: ignore[arg-type]
    plain = Engine.from_bundle(text_classification_model.bundle, one_session)
    runner = engine.pool.runner
    assert isinstance(runner, SplitRunner) and isinstance(plain.pool.runner, OrtRunner)
    assert engine.info.batching["split_threads"] is True and engine.info.batching["parallel_runs"] == 2
    assert runner.one_thread.session.get_session_options().intra_op_num_threads == 1
    assert runner.all_cores.session.get_session_options().intra_op_num_threads == 2
    all_cores, one_thread = (r.session.get_session_options() for r in (runner.all_cores, runner.one_thread))
    # a lone batch's threads spin while it runs, and only then; one-thread runs beside others never spin
    assert config_entry(all_cores, "session.intra_op.allow_spinning") in (None, "1")  # unset: onnxruntime spins
    assert config_entry(all_cores, "session.force_spinning_stop") == "1"
    assert config_entry(one_thread, "session.intra_op.allow_spinning") == "0"
    used: list[str] = []
    for kind, session in (("all", runner.all_cores), ("one", runner.one_thread)):
        real = session.run
        monkeypatch.setattr(session, "run", lambda batch, real=real, kind=kind: used.append(kind) or real(batch))
    texts = [f"the film number {k} was {'good' if k % 2 else 'dull'} and long" for k in range(24)]
    params = ClassificationParams(top_k=None)

    async def main() -> tuple[list, list, list[str], list]:
        await engine.start()
        await plain.start()
        used.clear()
        alone = [(await engine.infer([text], params))[0] for text in texts[:3]]
        lone_kinds = list(used)
        together = [result[0] for result in await asyncio.gather(*(engine.infer([t], params) for t in texts))]
        expected = [(await plain.infer([text], params))[0] for text in texts]
        await engine.stop()
        await plain.stop()
        return alone, together, lone_kinds, expected

    alone, together, lone_kinds, expected = asyncio.run(main())
    assert lone_kinds == ["all"] * 3  # one request at a time: every thread
    assert "one" in used[3:]  # 24 at once, two rows a batch: batches side by side, one thread each
    for got, want in zip(alone + together, expected[:3] + expected, strict=True):
        assert [item["label"] for item in got] == [item["label"] for item in want]
        np.testing.assert_allclose([item["score"] for item in got], [item["score"] for item in want], atol=1e-5)


class ThreadScaledRunner:
    """Takes ``row_s`` per row divided by its thread count: a model whose threads all help."""

    output_names = ("logits",)

    def __init__(self, threads: int, row_s: float) -> None:
        self.threads, self.row_s = threads, row_s

    def run(self, batch: PaddedRows) -> dict[str, np.ndarray]:
        time.sleep(self.row_s * batch.input_ids.shape[0] / self.threads)
        return {"logits": np.zeros((batch.input_ids.shape[0], 2), dtype=np.float32)}


@pytest.mark.parametrize(
    ("row_s", "setting", "split"), [(0.004, None, True), (0.004, False, False), (0.11, None, False)]
)
def test_tuning_splits_the_threads_of_a_small_model_only(row_s: float, setting: bool | None, split: bool) -> None:
    tuner = Tuner(lambda threads: ThreadScaledRunner(threads, row_s), 101, 102, 1000, 128, budget_s=0.3, split=setting)
    candidates = {"intra_op_threads": [1, 2], "max_batch_tokens": [128, 256], "max_batch_size": [1, 2],
                  "parallel_runs": [1, 2]}  # fmt: skip
    choice, _ = tuner.tune(candidates, ThreadScaledRunner(2, row_s), threads=2)
    assert choice.intra_op_threads == 2 and choice.split_threads is split
    if split:  # both workers run batches at once, one thread each: decided, so not measured
        assert choice.parallel_runs == 2 and "parallel_runs" not in choice.tokens_per_second
    else:
        assert set(choice.tokens_per_second["parallel_runs"]) == {1, 2}


@pytest.mark.parametrize(
    ("row_s", "threads", "runs", "setting", "spin"),
    [
        (0.11, [1, 2], [1], None, True),  # a larger model, one run at a time on every thread: its threads spin
        (0.11, [1, 2], [1, 2], None, False),  # two runs at once share the session's threads: no spinning
        (0.004, [1, 2], [1, 2], None, True),  # a small model: split, its lone batches spin
        (0.11, [1], [1], None, False),  # one thread: nothing to spin
        (0.11, [1, 2], [1], False, False),  # as given
        (0.11, [1, 2], [1, 2], True, True),
    ],
)
def test_tuning_spins_the_threads_of_a_session_whose_batches_run_alone(
    row_s: float, threads: list[int], runs: list[int], setting: bool | None, spin: bool
) -> None:
    tuner = Tuner(lambda count: ThreadScaledRunner(count, row_s), 101, 102, 1000, 128, budget_s=0.3, spin=setting)
    candidates = {"intra_op_threads": threads, "max_batch_tokens": [128, 256], "max_batch_size": [1, 2],
                  "parallel_runs": runs}  # fmt: skip
    choice, _ = tuner.tune(candidates, ThreadScaledRunner(max(threads), row_s), threads=max(threads))
    assert choice.spin_runs is spin and choice.to_json()["intra_op_spinning"] is spin
    if setting is None and not choice.split_threads:
        assert spin == (choice.intra_op_threads > 1 and choice.parallel_runs == 1)


def test_the_served_session_spins_as_chosen_and_only_while_a_run_is_active(
    text_classification_model: TinyModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    def spinning(settings: Settings) -> tuple[bool, str | None, str | None]:
        """What /v1/models says, and the served session's spinning entries."""
        engine = Engine.from_bundle(text_classification_model.bundle, settings)
        assert isinstance(engine.pool.runner, OrtRunner)
        options = engine.pool.runner.session.get_session_options()
        allowed = config_entry(options, "session.intra_op.allow_spinning")
        return engine.info.batching["intra_op_spinning"], allowed, config_entry(options, "session.force_spinning_stop")

    untuned = {"intra_op_threads": 2, "model_workers": 2, "tune": False}
    said, allowed, _ = spinning(Settings(**untuned))  # type: ignore[arg-type]
    assert said is False and allowed == "0"
    said, allowed, stops = spinning(Settings(**untuned, intra_op_spinning=True))  # type: ignore[arg-type]
    assert said is True and allowed in (None, "1") and stops == "1"  # unset: onnxruntime spins

    def larger_model(name: str, path: Path, outputs: tuple, context: object, runner: object, settings: Settings,
                     *rest: object) -> tuple[object, BatchingChoice]:  # fmt: skip
        return runner, BatchingChoice(256, 2, 2, 1, True, spin_runs=True)

    monkeypatch.setattr("service.engine_load.tune_runner", larger_model)
    said, allowed, stops = spinning(Settings(intra_op_threads=2, model_workers=2, tune=True))
    assert said is True and allowed in (None, "1") and stops == "1"


def test_no_split_without_tuning_unless_asked(text_classification_model: TinyModel, tmp_path: Path) -> None:
    values = {"intra_op_threads": 2, "model_workers": 2, "tune": False}
    plain = Engine.from_bundle(text_classification_model.bundle, Settings(**values))  # type: ignore[arg-type]
    assert isinstance(plain.pool.runner, OrtRunner) and plain.info.batching["split_threads"] is False
    one_worker = Settings(**{**values, "model_workers": 1, "split_threads": True})  # type: ignore[arg-type]
    assert isinstance(Engine.from_bundle(text_classification_model.bundle, one_worker).pool.runner, OrtRunner)
