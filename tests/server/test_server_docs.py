"""/docs and /redoc work without internet access: every script, stylesheet and icon they load is served by the
server itself (server/http_docs.py), with its content type; and the access log and the metrics name these routes
and /openapi.json instead of calling them "unmatched". The API is one table, server.http.ROUTES: /openapi.json lists
exactly its routes, HttpRouter answers them (a wrong method 405), and FastAPI routes only the pages. No model is
loaded: the app's lifespan never starts."""

from __future__ import annotations

import json
import logging
import re

import pytest
from starlette.testclient import TestClient

from server.app import create_app
from server.http import ROUTES
from server.http_docs import DOCS_ASSETS
from server.http_ui import UI_ASSETS
from server.settings import Settings
from tests.server.helpers import assert_routes_logged

CONTENT_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


@pytest.fixture
def client(tmp_path):
    return TestClient(create_app(Settings(model=tmp_path, grpc_port=-1, access_log=True)))


LOADED = re.compile(r"""(?:\bsrc|\bhref|\bspec-url)=["']([^"']+)["']|\burl: *["']([^"']+)["']""")


def loaded_urls(html: str) -> list[str]:
    """The URLs a page makes the browser fetch: src and href attributes, Swagger UI's `url:`, ReDoc's spec-url."""
    return [a or b for a, b in LOADED.findall(html)]


@pytest.mark.parametrize(("page", "files"), [("/docs", {"swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"}),
                                             ("/redoc", {"redoc.standalone.js", "favicon.png"})])
def test_the_docs_pages_load_everything_from_this_server(client, page, files):
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert re.findall(r"https?:|//[a-z]", r.text) == []  # no other host, no CDN, no Google Fonts
    urls = loaded_urls(r.text)
    assert {u.rpartition("/")[2] for u in urls if u.startswith(DOCS_ASSETS + "/")} == files
    assert set(urls) == {f"{DOCS_ASSETS}/{f}" for f in files} | {"/openapi.json"}
    for url in urls:
        got = client.get(url)
        assert got.status_code == 200 and len(got.content) > 1000, url
        kind = CONTENT_TYPES.get(url[url.rfind("."):], "application/json")
        assert kind in got.headers["content-type"], (url, got.headers["content-type"])
    assert "openapi" in client.get("/openapi.json").json()


def test_behind_a_proxy_the_pages_load_under_its_root_path(tmp_path):
    app = create_app(Settings(model=tmp_path, grpc_port=-1, access_log=False))
    client = TestClient(app, root_path="/electric")
    urls = loaded_urls(client.get("/docs").text)
    assert urls and all(u.startswith("/electric/") for u in urls)


def test_the_access_log_and_the_metrics_name_the_docs_routes(client, caplog):
    caplog.set_level(logging.INFO, logger="electric.access")
    paths = {"/docs": "/docs", "/redoc": "/redoc", "/openapi.json": "/openapi.json",
             f"{DOCS_ASSETS}/swagger-ui.css": DOCS_ASSETS, f"{DOCS_ASSETS}/redoc.standalone.js": DOCS_ASSETS,
             f"{DOCS_ASSETS}/nope.js": DOCS_ASSETS, "/nope": "unmatched"}
    assert_routes_logged(client, caplog, paths)
    metrics = client.get("/metrics").text
    assert 'electric_requests_total{route="/docs",transport="http"} 1.0' in metrics
    assert f'electric_requests_total{{route="{DOCS_ASSETS}",transport="http"}} 3.0' in metrics
    assert "swagger-ui.css" not in metrics  # a mount is one route, not a label per file


def test_openapi_lists_exactly_the_api_routes_and_fastapi_routes_only_the_pages(client):
    api = client.get("/openapi.json").json()
    assert [(method.upper(), path) for path, ops in api["paths"].items() for method in ops] == \
        [(r.method, r.path) for r in ROUTES]
    assert {r.path for r in client.app.routes} == {"/openapi.json", "/docs", "/redoc", "/", "/ui", DOCS_ASSETS,
                                                   UI_ASSETS}


@pytest.mark.parametrize("root", ["", "/electric"])
def test_the_router_answers_a_wrong_method_405_and_info_without_the_key_401(tmp_path, caplog, root):
    client = TestClient(create_app(Settings(model=tmp_path, grpc_port=-1, api_key="k", access_log=True)),
                        root_path=root)
    caplog.set_level(logging.INFO, logger="electric.access")
    r = client.get(f"{root}/v1/score")
    assert (r.status_code, r.headers["allow"]) == (405, "POST")
    assert r.json() == {"error": "Method Not Allowed", "error_type": "method_not_allowed"}
    r = client.get(f"{root}/info")
    assert r.status_code == 401 and r.json() == {
        "error": "missing or wrong API key: send \"Authorization: Bearer KEY\"", "error_type": "unauthorized"}
    r = client.post(f"{root}/docs")  # FastAPI's 405, written the same way
    assert (r.status_code, r.headers["allow"]) == (405, "GET") and r.json()["error_type"] == "method_not_allowed"
    assert client.post(f"{root}/nope").json() == {"error": "Not Found", "error_type": "not_found"}
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "electric.access"]
    assert [(x["route"], x["status"], x["error_type"]) for x in logged] == [
        ("/v1/score", 405, "method_not_allowed"), ("/info", 401, "unauthorized"),
        ("/docs", 405, "method_not_allowed"), ("unmatched", 404, "not_found")]


@pytest.mark.parametrize("root", ["", "/electric"])
def test_an_api_path_with_a_trailing_slash_is_redirected_without_it_as_fastapi_does(tmp_path, root):
    client = TestClient(create_app(Settings(model=tmp_path, grpc_port=-1)), root_path=root)
    for method, path in (("post", "/v1/score/"), ("get", "/health/"), ("get", "/docs/")):
        r = getattr(client, method)(f"{root}{path}", follow_redirects=False)
        assert (r.status_code, r.headers["location"]) == (307, f"http://testserver{root}{path.rstrip('/')}"), path
    assert client.get(f"{root}/nope/", follow_redirects=False).status_code == 404


def test_an_installation_without_the_pages_files_is_told_how_to_install_them(tmp_path, monkeypatch):
    from electric import checkpoint

    real = checkpoint.importlib.util.find_spec
    monkeypatch.setattr(checkpoint.importlib.util, "find_spec",
                        lambda name, *a: None if name == "fastapi_offline" else real(name, *a))
    with pytest.raises(checkpoint.MissingExtra, match=re.escape(f"needs fastapi_offline, which this installation "
                                                                f"lacks: {checkpoint.install_hint('serve')}")):
        create_app(Settings(model=tmp_path, grpc_port=-1))
