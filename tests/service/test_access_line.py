"""One console line per request: what it was and what it cost (rows, tokens, queue and model time), never what it
carried; off with ``--no-access-log``; one JSON object per line with ``--log-format json``."""

from __future__ import annotations

import json
import logging

import pytest

from service.metrics import JsonFormatter
from service.settings import Settings
from tests.service.apptools import ready_app_client
from tests.service.tiny_models import TinyModel

SECRET = "a private sentence nobody may log"


def settings_for(tiny_models: dict[str, TinyModel], **overrides: object) -> Settings:
    bundle = tiny_models["text-classification"].bundle
    return Settings(models=[f"sentiment={bundle}"], intra_op_threads=1, tune=False, **overrides)  # type: ignore[arg-type]


def access_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "bertserve.access"]


def test_each_request_gets_one_line_with_its_costs_and_none_of_its_content(
    tiny_models: dict[str, TinyModel], caplog: pytest.LogCaptureFixture
) -> None:
    with ready_app_client(settings_for(tiny_models)) as client:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="bertserve.access"):
            assert client.post("/v1/text-classification", json={"inputs": [SECRET, "fine"]}).status_code == 200
            assert client.post("/v1/text-classification", json={"inputs": "x", "model": "nope"}).status_code == 404
    answered, refused = access_records(caplog)
    fields = answered.access  # type: ignore[attr-defined]
    assert answered.getMessage().startswith("POST /v1/text-classification 200 model=sentiment inputs=2 rows=2 tokens=")
    assert (fields["model"], fields["inputs"], fields["rows"]) == ("sentiment", 2, 2)
    assert fields["tokens"] >= 4  # two texts, [CLS] and [SEP] each
    assert fields["queue_ms"] >= 0 and fields["model_ms"] > 0 and fields["total_ms"] >= fields["model_ms"]
    assert SECRET not in answered.getMessage() and "fine" not in json.dumps(fields)
    assert refused.getMessage().startswith("POST /v1/text-classification 404 total_ms=")  # no model answered
    assert "model" not in refused.access  # type: ignore[attr-defined]

    entry = json.loads(JsonFormatter().format(answered))
    assert entry["logger"] == "bertserve.access" and entry["level"] == "INFO"
    assert {key: entry[key] for key in ("method", "path", "status", "model")} == {
        "method": "POST", "path": "/v1/text-classification", "status": 200, "model": "sentiment",
    }  # fmt: skip


def test_no_line_without_the_access_log(tiny_models: dict[str, TinyModel], caplog: pytest.LogCaptureFixture) -> None:
    settings = settings_for(tiny_models, access_log=False)
    with ready_app_client(settings) as client, caplog.at_level(logging.INFO, logger="bertserve.access"):
        assert client.post("/v1/text-classification", json={"inputs": "fine"}).status_code == 200
    assert access_records(caplog) == []
