"""benchmarks.gpu_processes on a CPU: ``python -m service --processes N`` loaded by N client processes, summed."""

from __future__ import annotations

from pathlib import Path

from benchmarks.gpu_processes import measure
from tests.service.conftest import text_classification_model, tiny_models  # noqa: F401 (the fixtures)
from tests.service.tiny_models import TinyModel


def test_each_count_serves_every_workload_from_all_its_clients(
    tmp_path: Path,
    text_classification_model: TinyModel,  # noqa: F811
) -> None:
    loads = {"short": ("clf", ["a good film", "a bad one", "fine"])}
    found = measure({"clf": text_classification_model.bundle}, loads, [1, 2], "cpu", 0.3, 1.0, tmp_path)
    assert found["total_clients"] == 128 and set(found["counts"]) == {"1", "2"}
    for count in (1, 2):
        point = found["counts"][str(count)]["short"]
        assert len(point["per_client"]) == count and all(rate > 0 for rate in point["per_client"])
        assert point["clients_each"] == 128 // count
        assert abs(point["sequences_per_s"] - sum(point["per_client"])) <= 0.1 * count  # each rounded to 0.1
