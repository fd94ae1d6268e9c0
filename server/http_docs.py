"""The API's pages, /docs (Swagger UI) and /redoc (ReDoc), with their JavaScript, CSS and icon served by this
server from an installed package instead of FastAPI's default CDN, so that both pages work on a machine without
internet access; no Google Fonts, no OAuth2 redirect page. Each page has a Content-Security-Policy (CSP) that says
so to the browser.

    app = FastAPI(..., docs_url=None, redoc_url=None)
    add_docs_routes(app)

The files are the `static` folder of `fastapi-offline` (a base dependency, MIT; swagger-ui-dist 5, Apache-2.0, and
ReDoc 2, MIT): swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png, 2.8 MB in all. Only the
files are used, not its `FastAPIOffline` app factory: the pages are ordinary routes of this app, so the access log
and the metrics name them (`/docs`, `/redoc`, `/docs-assets` for any of the files).
"""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from electric.checkpoint import require_extra

DOCS_ASSETS = "/docs-assets"  # where the files are mounted
ASSETS_PACKAGE = ("fastapi_offline", "static")  # (installed package, its folder of the files): found, not imported
# What the pages may load: this server's files and its API, and of inline code only the page's own (by its hash):
# Swagger UI's one inline script; ReDoc writes its styles into the page as it draws (styled-components) and parses
# the schema in a worker made from a blob. Images include the data: URIs of their stylesheets.
CSP = ("default-src 'self'; script-src 'self'{scripts}; style-src 'self'{styles}; img-src 'self' data:; "
       "connect-src 'self'; worker-src 'self' blob:; base-uri 'self'; form-action 'self'; frame-ancestors 'none'")
INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


def with_csp(page: HTMLResponse, styles: str = "") -> HTMLResponse:
    """`page` with its Content-Security-Policy: CSP, its inline scripts allowed by their SHA-256 (they name the
    schema's URL, which depends on the root path, so each page is hashed as it is made)."""
    hashes = [base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
              for code in INLINE_SCRIPT.findall(bytes(page.body).decode())]
    page.headers["content-security-policy"] = CSP.format(scripts="".join(f" 'sha256-{h}'" for h in hashes),
                                                         styles=styles)
    return page


def add_docs_routes(app: FastAPI) -> None:
    """GET /docs, GET /redoc and the files they load under DOCS_ASSETS, for an app made with docs_url=None and
    redoc_url=None. Every URL in the pages is a path on this server (behind a proxy, under its root_path). An
    installation without fastapi-offline (made before it was a dependency) is told how to install it."""
    require_extra("serving the API pages (/docs, /redoc)", (ASSETS_PACKAGE[0],), "serve")
    app.mount(DOCS_ASSETS, StaticFiles(packages=[ASSETS_PACKAGE]), name="docs-assets")

    def root(request: Request) -> str:
        return request.scope.get("root_path", "").rstrip("/")

    def openapi_url(request: Request) -> str:
        assert app.openapi_url is not None, "the pages are for an app that serves its schema"
        return root(request) + app.openapi_url

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        assets = root(request) + DOCS_ASSETS
        return with_csp(get_swagger_ui_html(openapi_url=openapi_url(request), title=f"{app.title} - Swagger UI",
                                            swagger_js_url=f"{assets}/swagger-ui-bundle.js",
                                            swagger_css_url=f"{assets}/swagger-ui.css",
                                            swagger_favicon_url=f"{assets}/favicon.png",
                                            swagger_ui_parameters=app.swagger_ui_parameters))

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        assets = root(request) + DOCS_ASSETS
        return with_csp(get_redoc_html(openapi_url=openapi_url(request), title=f"{app.title} - ReDoc",
                                       redoc_js_url=f"{assets}/redoc.standalone.js",
                                       redoc_favicon_url=f"{assets}/favicon.png", with_google_fonts=False),
                        styles=" 'unsafe-inline'")
