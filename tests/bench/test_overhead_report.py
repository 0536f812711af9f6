"""benchmarks.overhead's table: overhead is the server's CPU per request less the raw loop's per sequence, beside it
the load generator's own CPU per request (where measured), and a lone request's p50 against raw batch-1."""

from __future__ import annotations

from typing import Any

from benchmarks.overhead import markdown


def report(point: dict[str, Any]) -> dict[str, Any]:
    raw = {"sequences_per_s": 400.0, "cpu_ms_per_sequence": 5.0, "batch1_median_ms": 3.0,
           "batch1_paced_median_ms": 3.5}  # fmt: skip
    model = {"name": "sst2", "route": "/v1/text-classification", "raw": raw, "served": [point]}
    return {"tree": "abc", "duration_s": 15, "load_avg": {"start": [0.5], "end": [2.0]}, "models": [model]}


def test_the_row_gives_overhead_and_the_clients_cpu() -> None:
    point = {"concurrency": 32, "sequences_per_s": 360.0, "p50_ms": 80.0, "cpu_ms_per_request": 6.25,
             "client_cpu_ms_per_request": 0.31}  # fmt: skip
    assert "| sst2 | `/v1/text-classification` | 32 | 360.0 | 400.0 | 0.90 | 6.25 | 5.00 | 1.25 | 0.31 | 80.0 |  |" in (
        markdown(report(point))
    )
    del point["client_cpu_ms_per_request"]  # a report written before the column
    assert "| 1.25 | - | 80.0 |" in markdown(report(point))


def test_a_lone_request_is_held_against_raw_batch_one_back_to_back_and_paced() -> None:
    point = {"concurrency": 1, "sequences_per_s": 200.0, "p50_ms": 4.0, "cpu_ms_per_request": 9.0,
             "client_cpu_ms_per_request": 0.5}  # fmt: skip
    assert "| 4.0 | +1.00 (raw 3.00); +0.50 (paced 3.50) |" in markdown(report(point))
