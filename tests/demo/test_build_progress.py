"""The demo build's console: a quiet build shows its steps' latest progress line at a fixed pace, and the logs it
wrote are what the step printed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from demo import build


def test_a_quiet_step_shows_its_latest_progress_and_logs_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(build, "PROGRESS_EVERY_S", 0.0)
    script = "\n".join([
        "import sys, time",
        "for step in (1, 2):",
        "    sys.stdout.write(f'train: step {step}/2\\r'); sys.stdout.flush(); time.sleep(0.2)",
    ])  # fmt: skip
    log = tmp_path / "train.log"
    wall_s, _ = build.run_step("demo: training", [sys.executable, "-c", script], log, echo=False)
    shown = capsys.readouterr().out
    assert "demo: training, " in shown and "train: step 2/2" in shown
    assert log.read_bytes() == b"train: step 1/2\rtrain: step 2/2\r"
    assert wall_s >= 0.4
    build._part("done", echo=False)
    assert capsys.readouterr().out.startswith("\n   ")  # the summary resumes on its own line after progress lines


def test_a_failed_step_names_its_log_and_shows_its_tail(tmp_path: Path) -> None:
    log = tmp_path / "export.log"
    with pytest.raises(RuntimeError, match=r"demo: export failed \(exit 3\); log .*export\.log:\nbroken"):
        build.run_step("demo: export", [sys.executable, "-c", "print('broken'); raise SystemExit(3)"], log, echo=False)


def test_training_threads_wait_passively_unless_the_caller_chose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = "import os, sys; sys.stdout.write(os.environ.get('OMP_WAIT_POLICY', 'unset'))"
    for chosen, expected in ((None, "PASSIVE"), ("ACTIVE", "ACTIVE")):
        if chosen is None:
            monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
        else:
            monkeypatch.setenv("OMP_WAIT_POLICY", chosen)
        log = tmp_path / f"{expected}.log"
        build.run_step("demo: training", [sys.executable, "-c", script], log, echo=False, env=build.training_env())
        assert log.read_text() == expected
