"""benchmarks.studies.prepare_seed: its multi-input loads are long requests (tokenized on the prepare stage, so timed
there), and the report judges each load's p90 against the margin the service gives its seed."""

from __future__ import annotations

from pathlib import Path

from benchmarks.studies.prepare_seed import INLINE_CHARS, bodies_of, markdown
from service.prepare_stage import CALIBRATION_MARGIN, SEED_MARGIN


def test_the_ordinary_multi_input_loads_go_through_the_prepare_stage() -> None:
    for load, key in (("sst2-x16", "inputs"), ("embeddings-x32", "input")):
        bodies = bodies_of(load, Path("unused"))
        assert bodies and all(sum(map(len, body[key])) > INLINE_CHARS for body in bodies[:-1])


def test_a_load_is_covered_when_its_p90_is_within_the_margin() -> None:
    cover = SEED_MARGIN * CALIBRATION_MARGIN
    row = {"load": "x", "request": "r", "bundle": "b", "requests_timed": 3, "seed_us_per_char": 0.5,
           "median_us_per_char": 1.0, "first_x_seed": 30.0, "median_x_seed": 2.0,
           "max_after_first_x_seed": 40.0}  # fmt: skip
    report = {"tree": "t", "seconds": 1.0, "cpu_count": 2, "load_avg": {"start": [0], "end": [0]},
              "rows": [{**row, "p90_x_seed": cover}, {**row, "load": "y", "p90_x_seed": cover + 0.1}]}  # fmt: skip
    lines = {line.split(" | ")[0]: line for line in markdown(report).splitlines() if line.startswith("| x") or
             line.startswith("| y")}  # fmt: skip
    assert lines["| x"].endswith("| yes |") and lines["| y"].endswith("| NO |")
