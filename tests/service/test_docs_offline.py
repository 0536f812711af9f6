"""/docs and /redoc load their JavaScript and CSS from the service itself: they render with no network."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from selenium.webdriver import Chrome as WebDriver

from service.api.docs import ASSET_TYPES, ASSETS_URL
from service.app import create_app
from service.settings import Settings
from tests.service.apptools import free_port, real_server
from tests.service.browser import (
    BrowserMissing,
    foreign_urls,
    headless_chromium,
    requested_urls,
    wait_for,
    wait_for_text,
)

URL = re.compile(r"https?://[^\s\"'<>)]+")
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"  # ReDoc's menu shows it; the page's policy blocks it
REFERENCE = re.compile(r"""(?:src|href|url)\s*[:=]\s*["']([^"']+)["']""")


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Settings())) as test_client:
        yield test_client


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_name_no_url_outside_the_server(client: TestClient, page: str) -> None:
    html = client.get(page).text
    assert URL.findall(html) == []
    references = REFERENCE.findall(html)
    assert references, "the page loads nothing: the check above proves nothing"
    for reference in references:
        assert reference.startswith("/"), reference
        assert client.get(reference).status_code == 200, reference


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_load_their_assets_from_the_docs_assets_route(client: TestClient, page: str) -> None:
    html = client.get(page).text
    scripts = re.findall(r'<script src="([^"]+)"', html)
    assert scripts and all(script.startswith(ASSETS_URL + "/") for script in scripts)


@pytest.mark.parametrize("name", sorted(ASSET_TYPES))
def test_every_docs_asset_is_served_with_its_type(client: TestClient, name: str) -> None:
    response = client.get(f"{ASSETS_URL}/{name}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(ASSET_TYPES[name])
    assert len(response.content) > 1000


def test_the_swagger_and_redoc_bundles_are_the_real_libraries(client: TestClient) -> None:
    assert "SwaggerUIBundle" in client.get(f"{ASSETS_URL}/swagger-ui-bundle.js").text
    assert "Redoc" in client.get(f"{ASSETS_URL}/redoc.standalone.js").text
    assert ".swagger-ui" in client.get(f"{ASSETS_URL}/swagger-ui.css").text


def test_an_unknown_asset_is_a_404_with_the_error_shape(client: TestClient) -> None:
    response = client.get(f"{ASSETS_URL}/..%2Fcore.py")
    assert response.status_code == 404
    assert "error" in response.json()


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_pages_forbid_the_browser_any_other_host(client: TestClient, page: str) -> None:
    policy = dict(
        directive.strip().split(" ", 1) for directive in client.get(page).headers["Content-Security-Policy"].split(";")
    )
    assert policy["default-src"] == "'self'"
    for directive in ("script-src", "img-src", "connect-src", "style-src"):
        assert URL.search(policy[directive]) is None and "*" not in policy[directive]


def test_the_docs_stay_behind_the_api_key_like_the_spec_they_show() -> None:
    with TestClient(create_app(Settings(api_keys=["k"]))) as keyed:
        assert keyed.get("/docs").status_code == 401
        assert keyed.get("/docs", headers={"Authorization": "Bearer k"}).status_code == 200


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    try:
        with headless_chromium() as driver:
            yield driver
    except BrowserMissing as missing:
        pytest.fail(str(missing))


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with real_server(Settings(port=free_port())) as url:
        yield url


def test_swagger_ui_renders_in_a_browser_with_no_network(browser: WebDriver, server_url: str) -> None:
    requested_urls(browser)
    browser.get(f"{server_url}/docs")
    title = wait_for(browser, ".swagger-ui .info .title")[0]
    assert title.text.startswith("bertserve")
    assert len(wait_for(browser, ".swagger-ui .opblock")) >= 5
    network = requested_urls(browser)
    assert f"{server_url}{ASSETS_URL}/swagger-ui-bundle.js" in network.sent
    assert f"{server_url}/openapi.json" in network.sent
    assert foreign_urls(network.sent, server_url) == []


def test_redoc_renders_in_a_browser_with_no_network(browser: WebDriver, server_url: str) -> None:
    requested_urls(browser)
    browser.get(f"{server_url}/redoc")
    heading = wait_for_text(browser, "h1", "bertserve")
    assert heading.startswith("bertserve")
    network = requested_urls(browser)
    assert f"{server_url}{ASSETS_URL}/redoc.standalone.js" in network.sent
    assert foreign_urls(network.sent, server_url) == []
    assert set(foreign_urls(network.blocked, server_url)) <= {REDOC_LOGO}

