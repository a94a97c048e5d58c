"""The pages a person opens in a browser: the web page at ``/`` and the API description at ``/docs``
(Swagger UI) and ``/redoc``. Every asset comes from the installed packages, so all of it works on a
machine without internet.

The web page is plain HTML, CSS and JavaScript in ``hopgraph/serve/web/`` (package data, no build
step). Swagger UI's and ReDoc's bundles are the files the ``fastapi-offline`` wheel ships (we use
its files only, not its app class). None of these pages holds index data: the page asks the API
with the token the person signs in with, so they are open like ``/openapi.json``.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response

from hopgraph.serve.errors import NOSNIFF_HEADER

WEB = Path(__file__).resolve().parent / "web"
WEB_ASSETS = "/static/web"
DOCS_ASSETS = "/static/docs"
# The web page runs only its own files: no inline script, nothing from elsewhere, no framing.
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# Swagger UI and ReDoc start from an inline script and style themselves inline; they too reach only this
# server (ReDoc's branding logo and Swagger's validator badge would otherwise come from the internet).
DOCS_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": PAGE_POLICY,
    **NOSNIFF_HEADER,
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class WebAssets(StaticFiles):
    """The page's folder: an HTML file in it (``/static/web/index.html``) carries the page's headers
    too, so no path serves the page without its policy (a frame of another site, inline scripts)."""

    def file_response(
        self, full_path: Any, stat_result: os.stat_result, scope: Any, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        if str(full_path).endswith((".html", ".htm")):
            response.headers.update(PAGE_HEADERS)
        return response


def docs_assets() -> Path:
    """The folder of Swagger UI's and ReDoc's bundles inside the installed ``fastapi-offline`` wheel."""
    return Path(str(files("fastapi_offline") / "static"))


def offline(page: HTMLResponse) -> HTMLResponse:
    """An API description page that may load nothing from anywhere but this server."""
    page.headers["Content-Security-Policy"] = DOCS_POLICY
    return page


def install_pages(app: FastAPI) -> None:
    """Mount the web page, its assets and the API description pages on ``app``."""
    router = APIRouter(include_in_schema=False)
    openapi_url = app.openapi_url or "/openapi.json"

    @router.api_route("/", methods=["GET", "HEAD"])
    def page() -> FileResponse:
        return FileResponse(WEB / "index.html", media_type="text/html", headers=PAGE_HEADERS)

    @router.get("/docs")
    def swagger() -> HTMLResponse:
        return offline(
            get_swagger_ui_html(
                openapi_url=openapi_url,
                title=f"{app.title} - API",
                swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                swagger_favicon_url=f"{WEB_ASSETS}/favicon.svg",
                swagger_ui_parameters={"tryItOutEnabled": True, "validatorUrl": None},
            )
        )

    @router.get("/redoc")
    def redoc() -> HTMLResponse:
        return offline(
            get_redoc_html(
                openapi_url=openapi_url,
                title=f"{app.title} - API",
                redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
                redoc_favicon_url=f"{WEB_ASSETS}/favicon.svg",
                with_google_fonts=False,
            )
        )

    app.include_router(router)
    app.mount(WEB_ASSETS, WebAssets(directory=WEB), name="web-assets")
    app.mount(DOCS_ASSETS, StaticFiles(directory=docs_assets()), name="docs-assets")
