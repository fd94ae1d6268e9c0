"""The page a person opens in a browser, at / and /ui: what the model sees, drawn instead of printed as JSON
(replaced-token heatmap, sentences compared by score, a reranked n-best list with each total split into its parts,
classifier labels).

    add_ui_routes(app)

The page is three plain files in server/ui (index.html, ui.css, ui.js, and an icon), package data, served from
UI_ASSETS: no build step, nothing fetched from another host (its Content-Security-Policy says so to the browser),
so it works on a machine without a network. It is a client of the public API and nothing more: its script
calls /info, /v1/detect, /v1/score, /v1/rerank and /v1/classify with the key the user types, as any client
would, and reads /info to know which views the served models allow. The page itself is open, as /docs is (it
holds no data); every call it makes needs the key when the server has one.
"""

from __future__ import annotations

import html
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

UI_ASSETS = "/ui-assets"  # where server/ui is mounted
UI_DIR = Path(__file__).with_name("ui")  # the page's files: package data (pyproject.toml)
BASE = '<base href="/">'  # index.html's base URL, which the route sets to the app's root path (behind a proxy)
# what the browser may load: this server's files and its API, nothing inline, nothing from elsewhere
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'self'; form-action 'none'; frame-ancestors 'none'")


def add_ui_routes(app: FastAPI) -> None:
    """GET / and GET /ui (the page) and the files it loads under UI_ASSETS. Every URL in the page, the API's
    included, is relative to its <base>: the app's root path."""
    app.mount(UI_ASSETS, StaticFiles(directory=UI_DIR), name="ui-assets")
    text = (UI_DIR / "index.html").read_text(encoding="utf-8")
    if BASE not in text:
        raise RuntimeError(f"{UI_DIR / 'index.html'} has no {BASE}")

    async def ui(request: Request) -> HTMLResponse:
        root = html.escape(request.scope.get("root_path", "").rstrip("/"), quote=True)
        return HTMLResponse(text.replace(BASE, f'<base href="{root}/">', 1), headers={
            "content-security-policy": CSP, "cache-control": "no-cache"})

    for path in ("/", "/ui"):
        app.add_api_route(path, ui, methods=["GET"], include_in_schema=False)
