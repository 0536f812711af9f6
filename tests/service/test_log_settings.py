"""Triton's logging extension through tritonclient's ``get_log_settings`` / ``update_log_settings`` (REST and gRPC)
against a real server in this process: the settings follow the root logger's threshold, a change takes effect on the
server's own loggers (an access line stops and comes back), and what no threshold can say is refused, nothing
changed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.service.apptools import free_port, real_server_for
from tests.service.tiny_models import TinyModel

grpcclient = pytest.importorskip("tritonclient.grpc")
import tritonclient.http as httpclient  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

EVERYTHING_BUT_DEBUG = {"log_file": "", "log_format": "text", "log_error": True, "log_warning": True,
                        "log_info": True, "log_verbose_level": 0}  # fmt: skip


@pytest.fixture(scope="module")
def served(tiny_models: dict[str, TinyModel]) -> Iterator[tuple[str, Any, Any]]:
    grpc_port = free_port()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    try:
        with real_server_for(
            {"sst": tiny_models["text-classification"].bundle}, grpc_port=grpc_port, tune=False
        ) as url:
            yield (
                url,
                httpclient.InferenceServerClient(url.removeprefix("http://")),
                grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}"),
            )
    finally:
        root.setLevel(level)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def access_lines_of_one_request(url: str) -> int:
    lines = Lines()
    access = logging.getLogger("bertserve.access")
    access.addHandler(lines)
    try:
        assert httpx.post(f"{url}/v1/text-classification", json={"inputs": "a fine film"}).status_code == 200
    finally:
        access.removeHandler(lines)
    return len(lines.records)


def grpc_settings(client: Any) -> dict[str, Any]:
    settings = client.get_log_settings(as_json=True)["settings"]
    return {name: next(iter(value.values())) for name, value in settings.items()}


def test_settings_follow_the_threshold_both_ways(served: tuple[str, Any, Any]) -> None:
    url, http, grpc = served
    assert http.get_log_settings() == EVERYTHING_BUT_DEBUG
    assert access_lines_of_one_request(url) == 1
    quiet = http.update_log_settings({"log_info": False})
    assert quiet == {**EVERYTHING_BUT_DEBUG, "log_info": False}
    assert access_lines_of_one_request(url) == 0
    assert logging.getLogger("service").isEnabledFor(logging.WARNING)
    assert grpc_settings(grpc) == quiet
    grpc.update_log_settings({"log_verbose_level": 1})
    assert logging.getLogger("service").isEnabledFor(logging.DEBUG)
    assert http.get_log_settings()["log_verbose_level"] == 1
    assert http.update_log_settings({"log_verbose_level": 0, "log_info": True}) == EVERYTHING_BUT_DEBUG
    assert access_lines_of_one_request(url) == 1


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"log_file": "/tmp/server.log"}, "cannot change here"),
        ({"log_format": "ISO8601"}, "cannot change here"),
        ({"log_warning": False}, "thresholds"),
        ({"colour": True}, "unknown log setting 'colour'"),
        ({"log_info": "yes"}, "must be a bool"),  # REST only: tritonclient.grpc types each setting by its name
    ],
)
def test_what_no_threshold_says_is_refused(served: tuple[str, Any, Any], changes: dict[str, Any], said: str) -> None:
    _, http, grpc = served
    for client in (http, grpc) if not isinstance(changes.get("log_info"), str) else (http,):
        with pytest.raises(InferenceServerException, match=said):
            client.update_log_settings(changes)
    assert http.get_log_settings() == EVERYTHING_BUT_DEBUG
