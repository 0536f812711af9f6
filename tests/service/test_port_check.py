"""A taken port is one clear line before any model loads, naming the override."""

from __future__ import annotations

import socket

import pytest

from service.__main__ import main, port_problem
from tests.service.apptools import free_port


def test_a_free_port_has_no_problem() -> None:
    assert port_problem("127.0.0.1", free_port()) is None


def test_a_taken_port_stops_start_up_with_one_line_naming_the_override(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code = main(["--model", "demo=/nonexistent/bundle", "--port", str(port)])
    error = capsys.readouterr().err.strip()
    assert code == 2
    assert len(error.splitlines()) == 1
    assert f"127.0.0.1:{port}" in error
    assert "PORT=" in error and "--port" in error
