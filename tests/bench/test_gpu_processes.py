"""benchmarks.gpu_processes: its servers start side by side, and a failed start leaves none running."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import pytest

from benchmarks.gpu_processes import start_all


class Probe:
    def __init__(self, fail: bool = False) -> None:
        self.fail, self.entered, self.exited = fail, False, False

    def __enter__(self) -> Probe:
        if self.fail:
            raise RuntimeError("did not start")
        self.entered = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self.exited = True


def test_every_started_server_stops_when_one_fails_to_start() -> None:
    probes = [Probe(), Probe(fail=True), Probe()]
    with pytest.raises(RuntimeError, match="did not start"), ExitStack() as stack:
        start_all(stack, probes)
    assert [probe.entered for probe in probes] == [True, False, True]
    assert [probe.exited for probe in probes] == [True, False, True]


def test_started_servers_run_until_the_stack_closes() -> None:
    probes = [Probe(), Probe()]
    with ExitStack() as stack:
        start_all(stack, probes)
        assert all(probe.entered and not probe.exited for probe in probes)
    assert all(probe.exited for probe in probes)
