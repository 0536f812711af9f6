"""Screenshots of the playground, one per served model, with the page's own example input for its task.

    python -m service --models-dir models --port 8077 &          # the demo models (make demo)
    python docs/playground/screenshots.py --url http://127.0.0.1:8077 --out docs/playground

Writes OUT/<task>.png (a palette PNG of the whole page) and fails on a request the page shows as an
error. Needs Debian's chromium and chromium-driver (make browser) and Pillow.
"""

from __future__ import annotations

import argparse
import base64
import io
import sys
from pathlib import Path

import httpx
from PIL import Image
from selenium.webdriver import Chrome

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.service.browser import headless_chromium, open_playground, run_task


def save_small_png(png: bytes, path: Path, colours: int = 64) -> None:
    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def whole_page_png(driver: Chrome) -> bytes:
    """The whole page, below the window's bottom edge too (DevTools' captureBeyondViewport)."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"clip": clip, "captureBeyondViewport": True})
    return base64.b64decode(shot["data"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="base URL of a running server")
    parser.add_argument("--out", type=Path, default=Path("docs/playground"))
    parser.add_argument("--api-key", help="the server's API key, when it has one")
    args = parser.parse_args(argv)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    models = httpx.get(f"{args.url}/v1/models", headers=headers).raise_for_status().json()["models"]
    args.out.mkdir(parents=True, exist_ok=True)
    with headless_chromium(width=1000, height=800) as driver:
        open_playground(driver, args.url, api_key=args.api_key)
        for model in models:
            state = run_task(driver, model["name"])
            if state != "done":
                raise SystemExit(f"{model['name']}: the page shows an error instead of an answer")
            path = args.out / f"{model['task']}.png"
            save_small_png(whole_page_png(driver), path)
            print(f"{path}: {path.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
