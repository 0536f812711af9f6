"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by selenium, cut off from every host but
the local one, and the playground page driven through it: fill a task's form, run it, read what it rendered.

Used by the browser tests and by ``docs/playground/screenshots.py``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

INSTALL_HINT = "install Debian's chromium and chromium-driver (make test installs them when missing)"
LOCAL_SCHEMES = ("data:", "blob:", "about:", "chrome-error:")


class BrowserMissing(RuntimeError):
    pass


def browser_paths() -> tuple[str, str]:
    """(chromium, chromedriver) from PATH; BrowserMissing names what to install."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        raise BrowserMissing(INSTALL_HINT)
    return chromium, driver


@contextmanager
def headless_chromium(width: int = 1000, height: int = 900) -> Iterator[webdriver.Chrome]:
    """A headless Chromium whose host resolver knows only 127.0.0.1 (no network), with network logging on."""
    chromium, driver_path = browser_paths()
    options = Options()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={width},{height}",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


@dataclass(frozen=True)
class NetworkLog:
    sent: list[str]  # URLs the page requested that the browser went on to fetch
    blocked: list[str]  # URLs the browser refused to fetch (the page's Content-Security-Policy, ...)


def requested_urls(driver: webdriver.Chrome) -> NetworkLog:
    """What the page requested since the last call, from Chromium's network log."""
    urls: dict[str, str] = {}
    blocked: set[str] = set()
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message["params"]
        if message["method"] == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
        elif message["method"] == "Network.loadingFailed" and params.get("blockedReason"):
            blocked.add(params["requestId"])
    return NetworkLog(
        sent=[url for request, url in urls.items() if request not in blocked],
        blocked=[url for request, url in urls.items() if request in blocked],
    )


def foreign_urls(urls: list[str], base_url: str) -> list[str]:
    return [url for url in urls if not url.startswith(base_url) and not url.startswith(LOCAL_SCHEMES)]


def wait_for(driver: WebDriver, css: str, timeout_s: float = 30.0) -> Any:
    return WebDriverWait(driver, timeout_s).until(lambda page: page.find_elements(By.CSS_SELECTOR, css) or False)


def wait_for_text(driver: WebDriver, css: str, starts_with: str, timeout_s: float = 30.0) -> str:
    """The text of the first element matching ``css`` whose text starts with ``starts_with``, once there is one."""

    def found(page: WebDriver) -> str | bool:
        texts = [element.text for element in page.find_elements(By.CSS_SELECTOR, css)]
        return next((text for text in texts if text.startswith(starts_with)), False)

    return str(WebDriverWait(driver, timeout_s).until(found))


def open_playground(driver: WebDriver, base_url: str, api_key: str | None = None) -> None:
    """Load the page; with ``api_key``, type it into the key field; wait until the model list is filled."""
    driver.get(f"{base_url}/")
    state = wait_status(driver, ("ready", "error"))
    field = driver.find_element(By.ID, "api-key")
    if api_key is not None and field.get_attribute("value") != api_key:
        field.clear()
        field.send_keys(api_key, Keys.TAB)
        state = wait_status(driver, ("ready", "error"))
    assert state == "ready", driver.find_element(By.ID, "status").text
    wait_for(driver, "#model option")


def wait_status(driver: WebDriver, states: tuple[str, ...], timeout_s: float = 30.0) -> str:
    def reached(page: WebDriver) -> str | bool:
        state = page.find_element(By.ID, "status").get_attribute("data-state")
        return state if state in states else False

    return str(WebDriverWait(driver, timeout_s).until(reached))


def run_task(driver: WebDriver, model: str, fields: dict[str, str] | None = None) -> str:
    """Pick ``model``, replace the given form fields' text (by element id), press Run; the final status state."""
    select = Select(driver.find_element(By.ID, "model"))
    assert model in [option.get_attribute("value") for option in select.options], f"the page does not list {model}"
    driver.execute_script(SELECT_MODEL, model)
    for field_id, value in (fields or {}).items():
        field = driver.find_element(By.ID, field_id)
        field.clear()
        field.send_keys(value)
    driver.execute_script("document.getElementById('status').dataset.state = 'starting'")
    driver.find_element(By.ID, "run").click()
    return wait_status(driver, ("done", "error"))


SELECT_MODEL = """
const select = document.getElementById("model");
if (select.value !== arguments[0]) {
  select.value = arguments[0];
  select.dispatchEvent(new Event("change"));
}
"""


@dataclass(frozen=True)
class CurlCommand:
    url: str
    headers: list[str]
    body: dict[str, Any]


def shown_curl(driver: WebDriver) -> CurlCommand:
    """The curl command the page shows, taken apart: URL, -H values, the -d JSON body."""
    text = driver.find_element(By.ID, "curl").text
    url = re.search(r"curl -s (\S+)", text)
    body = re.search(r"-d '((?:[^']|'\\'')*)'\s*$", text)
    assert url is not None and body is not None, f"unexpected curl command: {text!r}"
    headers = re.findall(r"-H [\"']([^\"']*)[\"']", text)
    return CurlCommand(url.group(1), headers, json.loads(body.group(1).replace("'\\''", "'")))


def score_rows(driver: WebDriver) -> list[tuple[str, float, str]]:
    """(label, data-score, shown percentage text) of every score bar, top to bottom."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#result .score-row")
    return [
        (
            str(row.get_attribute("data-label")),
            float(str(row.get_attribute("data-score"))),
            row.find_element(By.CSS_SELECTOR, ".score").text,
        )
        for row in rows
    ]


def entity_marks(driver: WebDriver) -> list[tuple[str, str, float]]:
    """(highlighted text, type, data-score) of every entity mark, in text order."""
    marks = driver.find_elements(By.CSS_SELECTOR, "#result mark.entity")
    return [
        (
            str(mark.find_element(By.CSS_SELECTOR, ".entity-text").get_attribute("textContent")),
            str(mark.get_attribute("data-type")),
            float(str(mark.get_attribute("data-score"))),
        )
        for mark in marks
    ]


def answer_mark(driver: WebDriver) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, "#result mark.answer").get_attribute("textContent"))


def highlighted_text(driver: WebDriver) -> str:
    """The whole highlighted paragraph's text content (context or input text, marks included)."""
    return str(driver.find_element(By.CSS_SELECTOR, "#result .highlighted").get_attribute("textContent"))
