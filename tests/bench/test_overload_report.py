"""benchmarks.overload_report / overload_client / overload: goodput between completions, the targets, the status
classes, Retry-After order, merging loads run one at a time, and the CLI's reading of loads, models and deadline."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from benchmarks.overload import deadline_of, model_paths, selected_loads
from benchmarks.overload_client import Answer, Tally, backoff_s, no_backoff_after_429, throughput_between
from benchmarks.overload_report import (
    all_targets_met,
    markdown,
    merge,
    retry_after_distribution,
    status_classes,
    summarise_run,
)


def test_throughput_between_completions_steady_and_in_bursts() -> None:
    steady = [float(second) for second in range(1, 11)]  # one answer a second
    assert throughput_between(steady, 3.5, 8.5) == pytest.approx(1.0)
    bursts = [14.0] * 16 + [28.0] * 16 + [42.0] * 16  # 16 answers every 14 s
    # a fixed window 20..45 s would count 32 answers in 25 s (1.28/s); between completions it is 16 / 14 s
    assert throughput_between(bursts, 20.0, 45.0) == pytest.approx(32 / 28)
    assert throughput_between(bursts, 0.0, 13.0) is None  # nothing finished yet
    assert throughput_between([5.0] * 8, 0.0, 10.0) is None  # one completion moment: no interval


def tally_of(finished: list[float], latencies: list[float], others: dict[str, int]) -> Tally:
    tally = Tally()
    tally.admitted_finished = finished
    tally.admitted_latencies = latencies
    tally.statuses = Counter({"200": len(finished), **others})
    return tally


def test_goodput_and_targets_of_a_run() -> None:
    started, duration = 1000.0, 100.0
    finished = [started + 0.5 * k for k in range(1, 201)]  # 2 answers/s through the run
    tally = tally_of(finished, [1.0] * 196 + [14.0, 16.0, 16.0, 16.0], {"429": 300, "413": 2, "client_skipped": 5})
    tally.retry_after = Counter({"3": 200, "12": 40, "1": 60})
    rss = {"before_load": 100, "start": 100, "middle": 101, "end": 104}
    run = summarise_run(tally, started, duration, capacity_rps=2.1, factor=5, deadline_s=30.0, rss=rss)
    assert run["goodput_rps"] == pytest.approx(2.0)
    assert run["goodput_vs_capacity"] == pytest.approx(2.0 / 2.1)
    assert run["rate_rps"] == pytest.approx(10.5)
    assert run["sent_rps"] == pytest.approx((200 + 300 + 2) / 100)
    assert run["by_class"]["429"] == 300 and run["by_class"]["413"] == 2 and run["by_class"]["5xx"] == 0
    assert list(run["retry_after_s"]) == ["1", "3", "12"]
    assert run["admitted_p99_s"] == 16.0  # > 15 s, half the deadline
    assert run["targets"] == {
        "goodput_at_least_0.9x_capacity": True,
        "admitted_p99_at_most_half_the_deadline": False,
        "no_5xx": True,
        "no_connection_errors_or_timeouts": True,
        "rss_growth_under_5pct": True,
    }


def test_low_goodput_5xx_timeouts_and_memory_growth_miss_their_targets() -> None:
    finished = [10.0 + k for k in range(1, 51)]  # 1 answer/s against a capacity of 2
    tally = tally_of(finished, [1.0] * 50, {"504": 3, "503": 1, "client_timeout": 1})
    run = summarise_run(tally, 10.0, 60.0, 2.0, 2, 30.0, {"before_load": 100, "start": 100, "middle": 103, "end": 106})
    assert run["by_class"]["5xx"] == 4 and run["by_class"]["client_timeout"] == 1
    missed = ("goodput_at_least_0.9x_capacity", "no_5xx", "no_connection_errors_or_timeouts", "rss_growth_under_5pct")
    assert not any(run["targets"][name] for name in missed)
    entry = {
        "command": "python -m benchmarks.overload --load ner-long",
        "server_args": "",
        "deadline_s": 30.0,
        "load": {
            "path": "/v1/token-classification",
            "what": "5 KB texts",
            "model": "m",
            "max_length": 128,
            "bodies": {
                "distinct_bodies": 2,
                "body_bytes": {"min": 1, "max": 2},
                "text_tokens_per_request": {"min": 1, "max": 2},
            },
        },
        "capacity": {"concurrency": 32, "answers_per_s": 2.0, "source": "given", "statuses": {}},
        "runs": [{**run, "load_avg": {"start": [1.0, 1.0, 1.0], "end": [2.0, 1.0, 1.0]}}],
    }
    results = {"loads": {"ner-long": entry}}
    assert not all_targets_met(results)
    text = markdown(results)
    assert "## ner-long" in text and "| ner-long | 2x | no | yes | no | no | no |" in text


def test_status_classes_and_retry_after_order() -> None:
    classes = status_classes({"200": 5, "429": 4, "413": 1, "422": 2, "500": 1, "504": 2, "connection_error": 3})
    assert classes["5xx"] == 3 and classes["other_4xx"] == 2 and classes["connection_error"] == 3
    assert list(retry_after_distribution(Counter({"10": 1, "2": 1, "none": 1, "1": 1}))) == ["1", "2", "10", "none"]


def test_closed_loop_clients_back_off_on_429() -> None:
    assert backoff_s(Answer(200, None)) == 0.0
    assert backoff_s(Answer(429, "0")) == 0.0
    assert backoff_s(Answer(429, "30")) == 1.0  # capped
    assert 0 < backoff_s(Answer(503, None)) < 0.5
    assert 0 < backoff_s(None) < 0.5  # a connection error


def test_storm_clients_ignore_retry_after_and_their_run_is_labelled() -> None:
    assert no_backoff_after_429(Answer(429, "30")) == 0.0
    assert no_backoff_after_429(Answer(503, None)) == backoff_s(Answer(503, None)) > 0
    finished = [100.0 + k for k in range(1, 21)]
    run = summarise_run(tally_of(finished, [0.5] * 20, {"429": 900}), 100.0, 20.0, 1.0, 32, 5.0,
                        {"start": 100, "end": 100})  # fmt: skip
    run.update(storm_concurrency=32, shed={"before_tokenizing": 880, "over_budget": 20}, load_avg={
        "start": [1.0], "end": [2.0]})  # fmt: skip
    entry = {"command": "c", "server_args": "", "deadline_s": 5.0, "runs": [run], "capacity": {
        "concurrency": 32, "answers_per_s": 1.0, "source": "s", "statuses": {}}, "load": {
        "path": "/v1/x", "what": "w", "model": "m", "max_length": 512, "bodies": {"distinct_bodies": 1, "body_bytes": {
            "min": 1, "max": 2}, "text_tokens_per_request": {"min": 1, "max": 2}}}}  # fmt: skip
    report = markdown({"loads": {"classify-512": entry}})
    assert "| c=32, Retry-After ignored | closed loop |" in report
    assert "{'before_tokenizing': 880, 'over_budget': 20}" in report


def test_merge_keeps_loads_not_run_now() -> None:
    previous = {"loads": {"qa-long": {"runs": ["old qa"]}, "short": {"runs": ["old short"]}}}
    merged = merge(previous, {"loads": {"short": {"runs": ["new short"]}}})
    assert merged["loads"] == {"qa-long": {"runs": ["old qa"]}, "short": {"runs": ["new short"]}}
    assert merge(None, {"loads": {"short": {}}})["loads"] == {"short": {}}


def test_cli_reads_loads_models_and_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    assert selected_loads("all") == ["short", "qa-long", "embeddings-long", "ner-long"]
    assert selected_loads("long,qa-long") == ["qa-long", "embeddings-long", "ner-long"]
    with pytest.raises(ValueError, match="unknown load"):
        selected_loads("qa")
    assert model_paths(["qa=b/qa", "ner=b/ner"], ["qa-long", "ner-long"]) == {
        "qa": ("qa", Path("b/qa")),
        "ner": ("ner", Path("b/ner")),
    }
    assert model_paths(["mine=b/s"], ["short"]) == {"sst2": ("mine", Path("b/s"))}  # one load: any served name
    with pytest.raises(ValueError, match="roles"):
        model_paths(["mine=b/s"], ["short", "qa-long"])
    monkeypatch.delenv("BERTSERVE_TIMEOUT_S", raising=False)
    assert deadline_of("") == 30.0
    assert deadline_of("--max-queue 8 --timeout-s 5") == 5.0
    assert deadline_of("--timeout-s=2.5") == 2.5
    monkeypatch.setenv("BERTSERVE_TIMEOUT_S", "12")
    assert deadline_of("--max-queue 8") == 12.0
