"""The playground page: served from the package, open without a key, and in a real (headless) Chromium it renders
exactly what the API answers for the request its curl command shows, for every task."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from selenium.webdriver import Chrome as WebDriver
from selenium.webdriver.common.by import By

from service.api.playground import PAGE_FILES
from service.app import create_app
from service.settings import Settings
from tests.service.apptools import real_server_for
from tests.service.browser import (
    SELECT_MODEL,
    BrowserMissing,
    answer_mark,
    entity_marks,
    foreign_urls,
    headless_chromium,
    highlighted_text,
    open_playground,
    requested_urls,
    run_task,
    score_rows,
    shown_curl,
    wait_status,
)
from tests.service.tiny_models import SERVED_TASKS, TinyModel

KEY = "playground-test-key"
URL = re.compile(r"https?://")


def test_the_root_redirects_to_the_page_and_its_files_are_served() -> None:
    with TestClient(create_app(Settings())) as client:
        root = client.get("/", follow_redirects=False)
        assert root.status_code == 307 and root.headers["location"] == "playground"
        page = client.get("/playground")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        for name, media_type in PAGE_FILES.items():
            assert f'src="playground/{name}"' in page.text or f'href="playground/{name}"' in page.text
            served = client.get(f"/playground/{name}")
            assert served.status_code == 200 and served.headers["content-type"].startswith(media_type)
            assert URL.search(served.text) is None, f"{name} names an external URL"
        assert URL.search(page.text) is None
        assert client.get("/playground/index.py").status_code == 404


def test_the_page_is_open_with_api_keys_but_the_api_it_calls_is_not() -> None:
    with TestClient(create_app(Settings(api_keys=[KEY]))) as client:
        assert client.get("/", follow_redirects=False).status_code == 307
        assert client.get("/playground").status_code == 200
        assert all(client.get(f"/playground/{name}").status_code == 200 for name in PAGE_FILES)
        assert client.get("/playground/other").status_code == 404  # open, and nothing there
        assert client.get("/v1/models").status_code == 401
        assert client.get("/playgrounds").status_code == 401


@pytest.fixture(scope="module")
def server_url(tiny_models: dict[str, TinyModel]) -> Iterator[str]:
    with real_server_for({task: tiny_models[task].bundle for task in SERVED_TASKS}, api_keys=[KEY]) as url:
        yield url


@pytest.fixture(scope="module")
def browser(server_url: str) -> Iterator[WebDriver]:
    try:
        with headless_chromium() as driver:
            open_playground(driver, server_url, api_key=KEY)
            yield driver
    except BrowserMissing as missing:
        pytest.fail(str(missing))


def api_answer(driver: WebDriver, path: str) -> dict[str, Any]:
    """What the API answers for the body of the page's curl command (which must name ``path`` and the key header)."""
    curl = shown_curl(driver)
    assert curl.url.endswith(path)
    assert "Authorization: Bearer $BERTSERVE_API_KEY" in curl.headers
    response = httpx.post(curl.url, json=curl.body, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def assert_bars(driver: WebDriver, expected: list[tuple[str, float]]) -> None:
    rows = score_rows(driver)
    assert expected, "the API answered nothing: the comparison would prove nothing"
    assert [(label, score) for label, score, _ in rows] == [(label, pytest.approx(score)) for label, score in expected]
    for _, score, shown in rows:
        assert shown.endswith("%") and abs(float(shown[:-1]) - score * 100) <= 0.05 + 1e-9


def test_without_the_key_the_page_says_the_server_wants_one(server_url: str) -> None:
    try:
        with headless_chromium() as driver:
            driver.get(f"{server_url}/playground")
            assert wait_status(driver, ("error",)) == "error"
            status = driver.find_element(By.ID, "status").text
            assert status.startswith("401 unauthorized") and "API key" in status
            assert driver.find_elements(By.CSS_SELECTOR, "#model option") == []
    except BrowserMissing as missing:
        pytest.fail(str(missing))


def test_the_page_lists_the_served_models(browser: WebDriver) -> None:
    options = browser.find_elements(By.CSS_SELECTOR, "#model option")
    assert sorted(str(option.get_attribute("value")) for option in options) == sorted(SERVED_TASKS)


def test_the_curl_box_shows_the_request_before_the_first_run_and_follows_the_form(browser: WebDriver) -> None:
    browser.execute_script(SELECT_MODEL, "text-classification")
    before = shown_curl(browser)
    assert before.url.endswith("/v1/text-classification") and before.body["model"] == "text-classification"
    field = browser.find_element(By.ID, "text")
    field.clear()
    field.send_keys("typed, not run")
    assert shown_curl(browser).body["inputs"] == "typed, not run"


def test_text_classification_shows_every_label_with_its_score(browser: WebDriver) -> None:
    assert run_task(browser, "text-classification", {"text": "a wonderful film"}) == "done"
    answer = api_answer(browser, "/v1/text-classification")
    assert shown_curl(browser).body["inputs"] == "a wonderful film"
    assert_bars(browser, [(item["label"], item["score"]) for item in answer["results"][0]])
    assert len(score_rows(browser)) == 3  # every label of the model, not only the best one


def test_token_classification_highlights_each_entity_with_its_type(browser: WebDriver) -> None:
    text = "John Smith works for Google in London."
    assert run_task(browser, "token-classification", {"text": text}) == "done"
    entities = api_answer(browser, "/v1/token-classification")["results"][0]
    assert entities, "the API found no entity: the comparison would prove nothing"
    expected = [(text[item["start"] : item["end"]], item["entity_group"], item["score"]) for item in entities]
    shown = entity_marks(browser)
    assert [(word, kind) for word, kind, _ in shown] == [(word, kind) for word, kind, _ in expected]
    assert [score for *_, score in shown] == pytest.approx([score for *_, score in expected])
    position, with_types = 0, ""
    for item in entities:
        with_types += text[position : item["end"]] + item["entity_group"]
        position = item["end"]
    assert highlighted_text(browser) == with_types + text[position:]


def test_question_answering_highlights_the_answer_in_the_context(browser: WebDriver) -> None:
    fields = {"question": "where does john live?", "context": "john lives in paris with his family."}
    assert run_task(browser, "question-answering", fields) == "done"
    answers = api_answer(browser, "/v1/question-answering")["results"][0]
    best = answers[0]
    assert answer_mark(browser) == best["answer"] == fields["context"][best["start"] : best["end"]]
    assert highlighted_text(browser) == fields["context"]
    assert_bars(browser, [(item["answer"], item["score"]) for item in answers])


def test_fill_mask_lists_the_candidates(browser: WebDriver) -> None:
    assert run_task(browser, "fill-mask", {"text": "paris is the [MASK] of france."}) == "done"
    per_mask = api_answer(browser, "/v1/fill-mask")["results"][0]
    assert len(per_mask) == 1 and len(per_mask[0]) == 5
    assert_bars(browser, [(item["token_str"], item["score"]) for item in per_mask[0]])


def test_zero_shot_classification_scores_the_candidate_labels(browser: WebDriver) -> None:
    fields = {"text": "the team won the game", "candidate-labels": "film, city, music"}
    assert run_task(browser, "zero-shot-classification", fields) == "done"
    assert shown_curl(browser).body["candidate_labels"] == ["film", "city", "music"]
    result = api_answer(browser, "/v1/zero-shot-classification")["results"][0]
    assert_bars(browser, list(zip(result["labels"], result["scores"], strict=True)))


def test_rerank_orders_the_documents(browser: WebDriver) -> None:
    documents = ["paris is the capital of france.", "berlin is a city in germany.", "the film was good."]
    fields = {"query": "what is the capital of france?", "documents": "\n".join(documents)}
    assert run_task(browser, "rerank", fields) == "done"
    results = api_answer(browser, "/v1/rerank")["results"]
    assert_bars(browser, [(documents[item["index"]], item["relevance_score"]) for item in results])


def test_an_api_error_is_shown_not_rendered(browser: WebDriver) -> None:
    assert run_task(browser, "fill-mask", {"text": "no mask token here"}) == "error"
    assert browser.find_element(By.ID, "status").text.startswith("4")
    assert browser.find_elements(By.CSS_SELECTOR, "#result *") == []


def test_the_page_talks_to_no_other_host(browser: WebDriver, server_url: str) -> None:
    requested_urls(browser)
    open_playground(browser, server_url, api_key=KEY)
    assert run_task(browser, "text-classification") == "done"
    network = requested_urls(browser)
    assert {f"{server_url}/v1/models", f"{server_url}/v1/text-classification"} <= set(network.sent)
    assert foreign_urls(network.sent + network.blocked, server_url) == []
