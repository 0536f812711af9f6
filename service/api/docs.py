"""``/docs`` (Swagger UI) and ``/redoc`` served from the package: their JavaScript and CSS come from the
``fastapi-offline`` wheel, so the pages render with no network (FastAPI's own pages load them from a CDN).

``create_app`` turns FastAPI's docs routes off (``docs_url=None``, ``redoc_url=None``) and includes this router.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

from service.errors import NotFound

DOCS_URL = "/docs"
REDOC_URL = "/redoc"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
ASSETS_URL = "/docs/assets"
ASSET_TYPES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
# No call to swagger.io's online validator (Swagger UI's default): nothing leaves the server.
SWAGGER_UI_PARAMETERS = {"validatorUrl": None}
# The pages may load and call nothing but this server (ReDoc's menu would otherwise fetch its maker's logo from a
# CDN). Both pages start their library with an inline script; ReDoc runs its search in a blob: worker.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'"
)

router = APIRouter(include_in_schema=False)


def assets_folder() -> Path:
    return Path(str(files("fastapi_offline") / "static"))


def _page(request: Request, render: Callable[..., HTMLResponse], name: str, **assets: str) -> HTMLResponse:
    """One of the docs pages under the app's root path, its assets named relative to ``ASSETS_URL``."""
    root = request.scope.get("root_path", "")
    page = render(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - {name}",
        **{key: f"{root}{ASSETS_URL}/{asset}" for key, asset in assets.items()},
    )
    page.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    return page


@router.get(DOCS_URL)
async def swagger_ui(request: Request) -> HTMLResponse:
    render = functools.partial(
        get_swagger_ui_html,
        oauth2_redirect_url=f"{request.scope.get('root_path', '')}{OAUTH2_REDIRECT_URL}",
        swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
    )
    return _page(
        request, render, "Swagger UI",
        swagger_js_url="swagger-ui-bundle.js", swagger_css_url="swagger-ui.css", swagger_favicon_url="favicon.png",
    )  # fmt: skip


@router.get(OAUTH2_REDIRECT_URL)
async def swagger_ui_oauth2_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get(REDOC_URL)
async def redoc(request: Request) -> HTMLResponse:
    render = functools.partial(get_redoc_html, with_google_fonts=False)
    return _page(request, render, "ReDoc", redoc_js_url="redoc.standalone.js", redoc_favicon_url="favicon.png")


@router.get(ASSETS_URL + "/{name}")
async def docs_asset(name: str) -> FileResponse:
    if name not in ASSET_TYPES:
        raise NotFound(f"no docs asset named {name!r}")
    return FileResponse(assets_folder() / name, media_type=ASSET_TYPES[name])
