"""benchmarks.gpu's report: the in-process engine's section beside the raw loop and the server."""

from __future__ import annotations

from benchmarks.gpu_report import core_lines, markdown


def results(with_core: bool = True) -> dict:
    found = {
        "raw_cuda": {"base-128": {"sequences_per_s": 11000.0, "best_batch_size": 512, "batch1_p50_ms": 1.4,
                                  "sweep": {"1": 700.0, "32": 8000.0, "512": 11000.0}}},
        "served": {"base-128": {"c1": {"p50_ms": 2.5, "sequences_per_s": 400.0},
                                "c32": {"sequences_per_s": 1260.0, "server": {"rows_per_batch": 32.0,
                                                                             "run_ms_per_batch": 71.0}},
                                "c128": {"sequences_per_s": 1600.0}, "c32x16": {"sequences_per_s": 2300.0}}},
    }  # fmt: skip
    if with_core:
        found["core"] = {"base-128": {"c1": {"sequences_per_s": 500.0, "rows_per_batch": 1.0, "model_ms_per_row": 1.5},
                                      "c32": {"sequences_per_s": 4000.0, "rows_per_batch": 30.0,
                                              "model_ms_per_row": 0.2},
                                      "exact-c32": {"sequences_per_s": 900.0, "rows_per_batch": 28.0,
                                                    "model_ms_per_row": 1.1}}}  # fmt: skip
    return found


def test_the_engine_row_puts_each_contexts_model_time_a_row_side_by_side() -> None:
    row = core_lines(results())[6]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    # raw: 1000 / 8,000 seq/s at batch 32; bucketed engine, then exact; served: 71 ms / 32 rows a batch
    assert cells == ["base-128", "0.125", "500.0", "4,000.0", "30.0", "0.200", "900.0", "28.0", "1.100", "1,260.0",
                     "32.0", "2.219"]  # fmt: skip


def test_without_engine_points_the_report_has_no_engine_section() -> None:
    assert core_lines(results(with_core=False)) == []
    assert "In process" not in markdown(results(with_core=False))
    assert "In process" in markdown(results())


def test_the_processes_section_sums_the_clients_beside_the_one_process_point() -> None:
    from benchmarks.gpu import server_counts
    from benchmarks.gpu_processes import markdown_lines

    found = results()
    assert markdown_lines(found) == []
    found["processes"] = {"total_clients": 128, "counts": {
        "2": {"base-128": {"sequences_per_s": 2900.0, "per_client": [1500.0, 1400.0], "clients_each": 64}},
        "4": {"base-128": {"sequences_per_s": 5000.5, "per_client": [1250.0] * 4, "clients_each": 32}},
    }}  # fmt: skip
    lines = markdown_lines(found)
    assert "| workload | one process, c=128 | 2 processes | 4 processes |" in lines
    assert "| base-128 | 1,600.0 | 2,900.0 (1,500, 1,400) | 5,000.5 (1,250, 1,250, 1,250, 1,250) |" in lines
    assert "More than one serving process" in markdown(found)
    assert server_counts("2,4") == [2, 4] and server_counts("0") == [] and server_counts("") == []


def test_a_measure_keeps_only_the_export_of_the_report_it_finds() -> None:
    from benchmarks.gpu import drop_measured

    found = {"commands": ["export", "measure (cut short)", "measure"], "export": {"sst2": {}}, "load_avg_start": [1],
             **results(), "torch": {"sst2": {}}, "card": {"name": "H200"}}  # fmt: skip
    drop_measured(found)
    assert found == {"commands": ["export", "measure (cut short)", "measure"], "export": {"sst2": {}},
                     "load_avg_start": [1]}  # fmt: skip


def test_a_report_cut_short_after_its_first_workload_shows_what_it_measured() -> None:
    partial = {"raw_cuda": results()["raw_cuda"], "core": {}, "commands": ["measure"]}
    assert "| base-128 | 11,000.0 (512) | 1.40 | - | - | - | - | - | - |" in markdown(partial)
