"""API keys: 401 with the error shape and a WWW-Authenticate header without a right key; health stays open."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service.__main__ import settings_from_args
from service.app import create_app
from service.settings import Settings
from tests.service.apptools import free_port, real_server
from tests.service.test_contract import tool_env, venv_tool

KEYS = ["first-key", "second-key"]


def client(**settings: object) -> TestClient:
    return TestClient(create_app(Settings(**settings)))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic first-key"}, {"Authorization": "Bearer "}],
)
def test_a_missing_or_wrong_key_is_a_401_with_the_error_shape(headers: dict[str, str]) -> None:
    with client(api_keys=KEYS) as app:
        response = app.get("/v1/models", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "unauthorized"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert all(key not in response.text for key in KEYS)
        posted = app.post("/v1/text-classification", json={"inputs": "x"}, headers=headers)
        assert posted.status_code == 401


@pytest.mark.parametrize("key", KEYS)
def test_every_configured_key_opens_the_api(key: str) -> None:
    with client(api_keys=KEYS) as app:
        assert app.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200


def test_health_stays_open_and_metrics_only_when_not_protected() -> None:
    with client(api_keys=KEYS) as app:
        assert app.get("/health/live").status_code == 200
        assert app.get("/metrics").status_code == 200
        assert app.get("/openapi.json").status_code == 401
    with client(api_keys=KEYS, protect_metrics=True) as app:
        assert app.get("/health/live").status_code == 200
        assert app.get("/metrics").status_code == 401
        assert app.get("/metrics", headers={"Authorization": "Bearer second-key"}).status_code == 200


def test_without_keys_nothing_is_asked() -> None:
    with client() as app:
        assert app.get("/v1/models").status_code == 200
        assert "securitySchemes" not in app.get("/openapi.json").json().get("components", {})


def test_openapi_declares_the_bearer_scheme_and_leaves_health_open() -> None:
    with client(api_keys=KEYS) as app:
        schema = app.get("/openapi.json", headers={"Authorization": "Bearer first-key"}).json()
    assert schema["components"]["securitySchemes"]["bearerAuth"] == {"type": "http", "scheme": "bearer"}
    assert schema["security"] == [{"bearerAuth": []}]
    assert schema["paths"]["/health/live"]["get"]["security"] == []
    assert "security" not in schema["paths"]["/v1/models"]["get"]


def test_keys_come_from_flags_or_the_environment_and_never_show_in_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings_from_args(["--api-key", "a", "--api-key", "b"]).api_keys == ["a", "b"]
    monkeypatch.setenv("BERTSERVE_API_KEYS", "key-alpha-7, key-beta-9")
    settings = Settings()
    assert settings.api_keys == ["key-alpha-7", "key-beta-9"]
    assert "key-alpha-7" not in repr(settings) and "key-beta-9" not in repr(settings)


def test_the_generated_client_sends_the_key(tmp_path: Path) -> None:
    """openapi-python-client's AuthenticatedClient, generated from the keyed server's own spec, gets through."""
    settings = Settings(api_keys=KEYS, port=free_port())
    with real_server(settings) as url:
        spec = tmp_path / "openapi.json"
        headers = {"Authorization": f"Bearer {KEYS[0]}"}
        spec.write_text(json.dumps(httpx.get(f"{url}/openapi.json", headers=headers).json()))
        subprocess.run(
            [venv_tool("openapi-python-client"), "generate", "--path", str(spec), "--output-path",
             str(tmp_path / "keyed_client"), "--meta", "none"],
            check=True, cwd=tmp_path, capture_output=True, env=tool_env(),
        )  # fmt: skip
        sys.path.insert(0, str(tmp_path))
        try:
            generated = importlib.import_module("keyed_client")
            list_models = importlib.import_module("keyed_client.api.models.list_models")
            keyed = generated.AuthenticatedClient(base_url=url, token=KEYS[1])
            assert list_models.sync_detailed(client=keyed).status_code == 200
            assert list_models.sync_detailed(client=generated.Client(base_url=url)).status_code == 401
        finally:
            sys.path.remove(str(tmp_path))
