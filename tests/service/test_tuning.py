"""Start-up auto-tuning: picks inside the candidate sets it logs, never touches a setting given explicitly.

Nothing here depends on how fast anything ran: the tuner's picks are checked against its bounds only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from service.__main__ import settings_from_args
from service.engine import Engine
from service.sessions import OrtRunner, SplitRunner
from service.settings import TUNED_SETTINGS, Settings
from service.tuning import (
    CPU_UNSETTLED_TOKENS,
    BatchingChoice,
    Tuner,
    _at_least,
    candidate_sets,
    thread_candidates,
)
from service.tuning_probes import Sweep
from tests.service.apptools import serving
from tests.service.tiny_models import TinyModel

QUICK = 0.3  # seconds of tuning per model: enough for a tiny model's sweeps, a bound for anything slower


def test_auto_tuning_is_on_only_when_no_batch_setting_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTSERVE_TUNE", raising=False)
    assert Settings().tunes() and settings_from_args([]).tunes()
    assert Settings(max_wait_ms=5).tunes()
    for name in sorted(TUNED_SETTINGS):
        assert not Settings(**{name: 4}).tunes()  # type: ignore[arg-type]
    assert not settings_from_args(["--max-batch-tokens", "512"]).tunes()
    assert not settings_from_args(["--no-tune"]).tunes()
    assert settings_from_args(["--tune", "--max-batch-size", "4"]).tunes()
    monkeypatch.setenv("BERTSERVE_INTRA_OP_THREADS", "1")
    assert not Settings().tunes()


def test_tuner_picks_inside_the_candidate_sets_it_logs(
    text_classification_model: TinyModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="service.tuning")
    engine = Engine.from_bundle(text_classification_model.bundle, Settings(tune=True, tune_seconds=QUICK), name="tc")
    choice = engine.batching
    assert choice.tuned
    assert choice.candidates == candidate_sets(Settings(), engine.context.max_length)
    for name in TUNED_SETTINGS:
        assert getattr(choice, name) in choice.candidates[name], name
    assert choice.max_batch_size * min(128, engine.context.max_length) >= min(choice.max_batch_tokens, 128 * 128)
    (logged,) = [record.getMessage() for record in caplog.records if "tuned in" in record.getMessage()]
    assert f"picked from {choice.candidates}" in logged and f"max_batch_tokens {choice.max_batch_tokens}" in logged
    policy = engine.batcher.policy
    assert (policy.max_batch_tokens, policy.max_batch_size) == (choice.max_batch_tokens, choice.max_batch_size)
    runner = engine.pool.runner
    if choice.split_threads:  # a tiny model: a lone batch on every thread, concurrent batches on one each
        assert isinstance(runner, SplitRunner) and choice.parallel_runs == len(engine.workers) > 1
        assert runner.one_thread.session.get_session_options().intra_op_num_threads == 1
        runner = runner.all_cores
    assert isinstance(runner, OrtRunner) and choice.split_threads == (choice.intra_op_threads > 1)
    assert runner.session.get_session_options().intra_op_num_threads == choice.intra_op_threads


def test_tune_keeps_given_settings_fixed_and_an_explicit_setting_disables_auto_tuning(
    text_classification_model: TinyModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="service.tuning")
    pinned = Engine.from_bundle(
        text_classification_model.bundle, Settings(tune=True, tune_seconds=QUICK, max_batch_size=3)
    )
    assert pinned.batching.tuned and pinned.batching.candidates["max_batch_size"] == [3]
    assert pinned.batching.max_batch_size == pinned.batcher.policy.max_batch_size == 3
    caplog.clear()
    configured = Engine.from_bundle(text_classification_model.bundle, Settings(tune=None, max_batch_tokens=1000))
    assert configured.batching == BatchingChoice(1000, 32, Settings().intra_op_threads)
    assert configured.batcher.policy.max_batch_tokens == 1000
    assert not [record for record in caplog.records if "tuned in" in record.getMessage()]


def test_fill_mask_token_candidates_stay_under_the_output_cap() -> None:
    sets = candidate_sets(Settings(), max_length=64, max_tokens_cap=1000)
    assert sets["max_batch_tokens"] == [64, 128, 256, 512, 1000]
    assert sets["max_batch_size"] == [1, 2, 4, 8, 16, 32, 64, 128]


def test_thread_candidates_are_powers_of_two_and_the_cpu_count() -> None:
    assert thread_candidates(1) == [1]
    assert thread_candidates(2) == [1, 2]
    assert thread_candidates(6) == [1, 2, 4, 6]
    assert thread_candidates(16) == [1, 2, 4, 8, 16]


def test_the_knee_is_the_smallest_setting_within_five_percent_of_the_best() -> None:
    assert Sweep({1: 100.0, 2: 190.0, 4: 200.0, 8: 201.0}).knee() == 4
    assert Sweep({1: 100.0, 2: 99.0}).knee() == 1
    assert _at_least([512, 1024, 2048], 600) == 1024
    assert _at_least([512, 1024], 5000) == 1024


def test_models_and_metrics_show_the_batching_and_the_int8_figures(
    text_classification_model: TinyModel, tmp_path: Path
) -> None:
    bundle = shutil.copytree(text_classification_model.bundle, tmp_path / "tc")
    spec = json.loads((bundle / "bundle.json").read_text())
    figures = {
        "metric": "accuracy", "rows": 10, "fp32": 90.0, "int8": 80.0, "loss": 10.0, "max_loss": 0.5,
        "changed_predictions": 1, "int8_accepted": False, "data_sha256": "0" * 64,
    }  # fmt: skip
    (bundle / "bundle.json").write_text(json.dumps({**spec, "quantization_eval": figures}))
    settings = Settings(models=[f"tc={bundle}"], tune=True, tune_seconds=QUICK)  # type: ignore[call-arg]

    async def main() -> tuple[dict, Engine, str]:
        async with serving(settings) as (app, client):
            card = (await client.get("/v1/models")).json()["models"][0]
            return card, app.state.registry.engines["tc"], (await client.get("/metrics")).text

    card, engine, metrics = asyncio.run(main())
    assert card["batching"] == {
        **engine.batching.to_json(),
        "tuned": True,
        "workers": len(engine.workers),
        "shape_buckets": False,
    }
    assert card["quantization_eval"] == {key: value for key, value in figures.items() if key != "data_sha256"}
    for name in TUNED_SETTINGS:
        value = float(getattr(engine.batching, name))
        line = f'bertserve_batching{{model="tc",setting="{name}",source="tuned",task="text-classification"}} {value}'
        assert line in metrics


class SlowRunner:
    """Takes ``row_s`` per row of every batch (a stand-in for a big model), whatever its thread count."""

    output_names = ("logits",)

    def __init__(self, row_s: float) -> None:
        self.row_s = row_s

    def run(self, batch):  # type: ignore[no-untyped-def]
        time.sleep(self.row_s * batch.input_ids.shape[0])
        return {"logits": np.zeros((batch.input_ids.shape[0], 2), dtype=np.float32)}


@pytest.mark.parametrize(("row_s", "raised"), [(0.002, False), (0.03, True)])
def test_tuning_measures_every_thread_candidate_and_keeps_its_budget(row_s: float, raised: bool) -> None:
    built: list[int] = []

    def make(threads: int) -> SlowRunner:
        built.append(threads)
        return SlowRunner(row_s)

    tuner = Tuner(make, cls_id=101, sep_id=102, vocab_size=1000, max_length=128, budget_s=0.5)
    candidates = {"intra_op_threads": [1, 2], "max_batch_tokens": [128 * n for n in (1, 2, 4, 8, 16)],
                  "max_batch_size": [1, 2, 4, 8, 16, 32], "parallel_runs": [1, 2]}  # fmt: skip
    choice, _ = tuner.tune(candidates, SlowRunner(row_s), threads=1, build_s=0.01)
    assert set(choice.tokens_per_second["intra_op_threads"]) == {1, 2} and built == [2]
    # the stand-in sleeps, so two runs at once do twice the work: the tuner measures that and takes two
    assert set(choice.tokens_per_second["parallel_runs"]) == {1, 2} and choice.parallel_runs == 2
    budget = tuner.clock.budget_s
    assert choice.seconds <= 1.2 * budget
    if raised:  # 30 ms a row: the thread candidates and two sizes per sweep need ~0.9 s; the log says why
        assert budget > 0.5 and "the least its sweeps need" in tuner.budget_note
    else:
        assert budget == 0.5 and tuner.budget_note == "budget 0.5 s"


class FailsOffTheMainThread(SlowRunner):
    def run(self, batch):  # type: ignore[no-untyped-def]
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("session failed")
        return super().run(batch)


def test_a_failing_concurrent_run_ends_tuning_instead_of_hanging_it() -> None:
    tuner = Tuner(lambda threads: FailsOffTheMainThread(0.001), 101, 102, 1000, 128, budget_s=0.5)
    candidates = {"intra_op_threads": [1], "max_batch_tokens": [128], "max_batch_size": [1], "parallel_runs": [1, 2]}
    with pytest.raises(RuntimeError, match="session failed"):
        tuner.tune(candidates, FailsOffTheMainThread(0.001), threads=1)


class CallCostRunner(SlowRunner):
    """Each call costs ``call_s`` plus ``row_s`` a row: larger batches keep gaining, as a small model's on a CPU."""

    def __init__(self, call_s: float, row_s: float) -> None:
        super().__init__(row_s)
        self.call_s = call_s

    def run(self, batch):  # type: ignore[no-untyped-def]
        time.sleep(self.call_s)
        return super().run(batch)


@pytest.mark.parametrize(("largest", "budget_s"), [(1024, 0.2), (64, 5.0)])
def test_a_batch_sweep_the_budget_cuts_while_it_still_gains_picks_at_least_the_untuned_limits(
    largest: int, budget_s: float
) -> None:
    untuned = BatchingChoice(max_batch_tokens=2048, max_batch_size=32, intra_op_threads=1)
    sizes = [2**k for k in range(largest.bit_length())]
    candidates = {"intra_op_threads": [1], "max_batch_tokens": [128 * n for n in sizes], "max_batch_size": sizes,
                  "parallel_runs": [1]}  # fmt: skip
    tuner = Tuner(lambda threads: CallCostRunner(0.01, 0.0002), 101, 102, 1000, 128, budget_s=budget_s)
    choice, _ = tuner.tune(candidates, CallCostRunner(0.01, 0.0002), threads=1, untuned=untuned)
    measured = choice.tokens_per_second
    if largest == 1024:  # a 1024-row call alone takes longer than the budget: both sweeps end unsettled
        assert max(measured["max_batch_tokens"]) < 128 * 1024 and max(measured["max_batch_size"]) < 1024
        assert tuner.budget_note.count("not settled when the budget ended") == 2
        # on a CPU the token budget's floor stops at CPU_UNSETTLED_TOKENS (long rows lose beyond it)
        assert choice.max_batch_tokens >= min(2048, CPU_UNSETTLED_TOKENS) and choice.max_batch_size >= 32
    else:  # every size measured, each gaining on the last: the largest, whatever the untuned limits
        assert set(measured["max_batch_size"]) == set(sizes) and "not settled" not in tuner.budget_note
        assert (choice.max_batch_tokens, choice.max_batch_size) == (128 * 64, 64)


class CacheCliffRunner(SlowRunner):
    """A call costs ``call_s`` plus ``row_s`` a row up to ``cliff`` rows and three times that a row beyond: batches gain
    until their activations leave the cache, as a long-row model's do on a CPU past ~512 tokens."""

    def __init__(self, call_s: float, row_s: float, cliff: int) -> None:
        super().__init__(row_s)
        self.call_s, self.cliff = call_s, cliff

    def run(self, batch):  # type: ignore[no-untyped-def]
        rows = batch.input_ids.shape[0]
        time.sleep(self.call_s + self.row_s * rows * (1 if rows <= self.cliff else 3))
        return {"logits": np.zeros((rows, 2), dtype=np.float32)}


@pytest.mark.parametrize("after_the_loss", [True, False])
def test_a_batch_sweep_the_budget_cuts_after_a_step_that_gained_nothing_keeps_its_knee(after_the_loss: bool) -> None:
    """The budget ends the token sweep after its 8-row step, the first that lost to the 4-row one: the knee is seen,
    so 4 rows of 128 tokens, not the untuned 8,192 (MiniLM SQuAD's 256-token rows served 1.27x faster at c=128)."""
    untuned = BatchingChoice(max_batch_tokens=8192, max_batch_size=64, intra_op_threads=1)
    sizes = [1, 2, 4, 8, 16, 32, 64]
    candidates = {"intra_op_threads": [1], "max_batch_tokens": [128 * n for n in sizes], "max_batch_size": sizes,
                  "parallel_runs": [1]}  # fmt: skip
    tuner = Tuner(lambda threads: CacheCliffRunner(0.01, 0.001, 4), 101, 102, 1000, 128, budget_s=5.0)
    token_steps: list[float] = []

    def allows(seconds: float, share: float = 1.0) -> bool:  # the token sweep asks before its 4-, 8- and 16-row steps
        if share == 1.0:
            return True
        token_steps.append(seconds)
        return len(token_steps) <= (2 if after_the_loss else 1)

    tuner.clock.allows = allows  # type: ignore[method-assign]
    choice, _ = tuner.tune(candidates, CacheCliffRunner(0.01, 0.001, 4), threads=1, untuned=untuned)
    measured = choice.tokens_per_second["max_batch_tokens"]
    if after_the_loss:  # 1, 2, 4, 8 rows measured, 8 below 4: settled at 4 rows
        assert sorted(measured) == [128, 256, 512, 1024] and measured[1024] < measured[512]
        assert choice.max_batch_tokens == 512 and "max_batch_tokens not settled" not in tuner.budget_note
    else:  # cut after 4 rows, each step gaining: no knee seen, at least the untuned limit up to the CPU's floor
        assert sorted(measured) == [128, 256, 512] and measured[512] > measured[256]
        assert choice.max_batch_tokens == CPU_UNSETTLED_TOKENS and "max_batch_tokens not settled" in tuner.budget_note
