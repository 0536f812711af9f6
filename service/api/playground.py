"""``GET /playground``: one static page (HTML, JS, CSS shipped in the package) that calls the public API.

``GET /`` redirects to it. The page and its two files are open even when API keys are set: the page
asks for the key and sends it as ``Authorization: Bearer`` on its API calls, which need it as usual.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

from service.errors import NotFound

PLAYGROUND_URL = "/playground"
PAGE_FILES = {
    "playground.js": "text/javascript",
    "playground.css": "text/css",
}

router = APIRouter(include_in_schema=False)
root_router = APIRouter(tags=["playground"])  # GET / is documented: POST / is an inference route


def page_folder() -> Path:
    return Path(str(files("service") / "static" / "playground"))


@root_router.get(
    "/",
    status_code=307,
    response_class=RedirectResponse,
    responses={307: {"description": "To the playground page."}},
    tags=["playground"],
)
async def root() -> RedirectResponse:
    """The playground (``POST /`` is the HF Inference API when one model is served)."""
    return RedirectResponse("playground", status_code=307)


@router.get(PLAYGROUND_URL)
async def playground() -> FileResponse:
    return FileResponse(page_folder() / "index.html", media_type="text/html")


@router.get(PLAYGROUND_URL + "/{name}")
async def playground_file(name: str) -> FileResponse:
    if name not in PAGE_FILES:
        raise NotFound(f"no playground file named {name!r}")
    return FileResponse(page_folder() / name, media_type=PAGE_FILES[name])
