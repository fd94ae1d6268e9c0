"""HTTP transport: the API's routes, converting JSON to engine calls and engine answers to JSON. Nothing else.

One request path. `ROUTES` is the API: each route's method, path and endpoint, and what /openapi.json says of it.
Every request comes to `HttpRouter` (server/http_middleware.py), which calls the endpoint of a route in ROUTES (a
known path with another method: 405), and hands every other request to FastAPI, which serves the pages (/docs,
/redoc, /openapi.json, /, their files) and answers an unknown path 404. FastAPI routes no API request: it writes
the API's OpenAPI document from ROUTES and server/schemas.py (`add_openapi`).

Errors are mapped here, once: the core's `ServerError` types -> an HTTP status by `HTTP_STATUS` and the body
`{error, error_type}`; a path no route has -> 404 and a wrong method -> 405 with an `Allow` header (`http_error`).

A scoring POST is answered by `answer`: the checks of server/intake.py (the key, the body, the input count, the
schema), then its route's `Handler`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from server import intake, schemas
from server.engine import Answer, Engine
from server.errors import (
    BackendError,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    ServerError,
    Timeout,
    Unauthorized,
    UnreadableBody,
    ValidationError,
)
from server.http_protocol import RECEIVED_BEFORE_SHUTDOWN
from server.settings import Settings
from server.transport import status_for, timing_metadata

# the core's errors -> HTTP status (a subclass not listed takes its nearest listed base's: ShuttingDown -> 503)
HTTP_STATUS: dict[type[ServerError], int] = {
    ServerError: 500,
    ValidationError: 422,
    PayloadTooLarge: 413,
    UnreadableBody: 400,
    Unauthorized: 401,
    Overloaded: 429,
    NotReady: 503,
    Timeout: 504,
    BackendError: 500,
}


class ClientGone(Exception):
    """The HTTP client disconnected before its answer was ready (logged as status 499)."""


def _engine(request: Request) -> Engine:
    return request.app.state.engine


def json_bytes(data: object) -> bytes:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _json(data: object, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(json_bytes(data), status_code=status, headers=headers, media_type="application/json")


def error_response(err: ServerError) -> Response:
    """`err` as HTTP answers it: its status by HTTP_STATUS, the body `{error, error_type}`, and when to try again
    (`retry_headers`) for a refusal for now (every 429 and 503)."""
    return _json(err.body(), status_for(HTTP_STATUS, err), retry_headers(err.retry_after_s))


def retry_headers(seconds: float | None) -> dict[str, str] | None:
    """When to try again, as HTTP says it: `Retry-After` in whole seconds, rounded up and at least 1 (the header
    takes no fraction), and `retry-after-ms`, the estimate itself in milliseconds, which electric.client reads
    first; None for no estimate."""
    if seconds is None:
        return None
    return {"retry-after": str(max(1, math.ceil(seconds))), "retry-after-ms": str(max(1, round(seconds * 1e3)))}


def http_error(scope, status: int, detail: str, headers: Mapping[str, str] | None = None) -> Response:
    """A refusal of routing, with no ServerError behind it: 404 `not_found` (no route has the path), 405
    `method_not_allowed` (its routes take other methods, named in the `Allow` of `headers`); the body `{error,
    error_type}`, whose error type is noted for the access log."""
    kind = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
    scope.setdefault("state", {})["error_type"] = kind
    return _json({"error": detail, "error_type": kind}, status, headers)


def uncancel(task: asyncio.Task) -> None:
    """Take back one cancellation of `task` that was caught and answered (Python 3.11+ counts them, and a task with
    one pending is cancelled again at its next await; 3.10 counts none)."""
    take_back = getattr(task, "uncancel", None)
    if take_back is not None:
        take_back()


async def _until_disconnect(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _call(request: Request, coro) -> Answer:
    """Await an engine call in this task; if the client goes away first, cancel it (dropping its queued inputs)
    and raise ClientGone. One watcher task per request, no asyncio.wait (whose checks cost more than the rest)."""
    task = asyncio.current_task()
    assert task is not None, "awaited in the request's task"
    armed = True

    def client_gone(w: asyncio.Future) -> None:
        if armed and not w.cancelled():
            task.cancel()

    watch = asyncio.ensure_future(_until_disconnect(request))
    watch.add_done_callback(client_gone)
    try:
        answer = await coro
    except asyncio.CancelledError:
        if not (watch.done() and not watch.cancelled()):
            raise  # uvicorn cancels what still runs after the shutdown grace: the engine call drops its inputs
        uncancel(task)
        raise ClientGone() from None
    finally:
        armed = False
        watch.cancel()
    request.state.timing = answer.timing
    return answer


@dataclass(frozen=True)
class Handler:
    """A scoring route's request schema, engine call and response body, answered by `answer`. `call(engine, body,
    before_shutdown)`: before_shutdown as the engine takes it. `scorer`: the route runs the scorer (--model), whose
    backlog may refuse a big body before it is read."""

    schema: type[BaseModel]
    call: Callable[[Engine, Any, bool], Awaitable[Answer]]
    render: Callable[[Answer, Any], dict]
    scorer: bool = True

    async def respond(self, request: Request, body) -> Response:
        """Call the engine with a validated `body` and render its answer as JSON, with the timing headers. The
        connection says whether the request had come whole before the shutdown began (server/http_protocol.py);
        a request that did not come through it never did."""
        before = bool(request.scope.get("state", {}).get(RECEIVED_BEFORE_SHUTDOWN, False))
        a = await _call(request, self.call(_engine(request), body, before))
        return _json(self.render(a, body), headers=dict(timing_metadata(a.timing, sizes=True)))


async def answer(handler: Handler, request: Request) -> Response:
    """How a scoring POST is answered (its endpoint in ROUTES, with its route's `handler`): the API key first
    (401 before the body is read), a big body while the scorer is already behind its deadline 429 before it is read
    (Engine.refuse_big_body), then the body is read, parsed, counted and validated (server/intake.py) and the engine
    called. Every ServerError is answered here by HTTP_STATUS; a client that goes away gets 499 (in the log)."""
    state = request.scope.setdefault("state", {})
    try:
        engine = request.app.state.engine
        if engine is None:
            raise NotReady("the models are still loading")
        intake.require_key(engine.settings.api_key, header(request.scope, b"authorization").decode("latin-1"),
                           intake.HTTP_KEY)
        length = content_length(request.scope)
        busy = engine.refuse_big_body(length) if handler.scorer and length is not None else None
        if busy is not None:  # refused before its body is read: a refused megabyte costs what its headers did
            raise busy
        data = intake.read_json(header(request.scope, b"content-type").decode("latin-1"), await _body(request))
        intake.check_counts(data, engine.settings.max_inputs_per_request)
        return await handler.respond(request, intake.validate(handler.schema, data))
    except ServerError as err:
        state["error_type"] = err.error_type
        return error_response(err)
    except ClientGone:
        state["error_type"] = "client_closed"
        return Response(status_code=499)


def header(scope, name: bytes) -> bytes:
    """The first value of a (lower-case) header, or b"", as starlette's Headers.get finds it, without building
    Headers."""
    for key, value in scope["headers"]:
        if key == name:
            return value
    return b""


def content_length(scope) -> int | None:
    """The request's Content-Length, or None without one. httptools takes leading zeros and refuses a value over
    2**64 before the app sees it, so the digits left after the zeros are few; never more than int() converts."""
    value = header(scope, b"content-length")
    if not value.isdigit():
        return None
    digits = value.lstrip(b"0") or b"0"
    return int(digits) if len(digits) <= 20 else 2**64


async def _body(request: Request) -> bytes:
    """The whole body, read from the ASGI messages; ClientGone when the client leaves before sending it."""
    chunks = []
    while True:
        message = await request.receive()
        if message["type"] != "http.request":
            raise ClientGone()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _rerank(engine: Engine, body: schemas.RerankRequest, before: bool) -> Awaitable[Answer]:
    weights = body.weights.model_dump(exclude_none=True) if body.weights else None
    return engine.rerank(body.as_lists(), weights=weights, truncate=body.truncate, before_shutdown=before)


def _results(a: Answer, body) -> dict:
    return {"model": a.model, "results": [r.to_dict() for r in a.results]}


SCORE = Handler(schemas.ScoreRequest, lambda e, b, before: e.score(
    b.texts, per_token=b.per_token, truncate=b.truncate, ngram=b.ngram, before_shutdown=before), _results)
RERANK = Handler(schemas.RerankRequest, _rerank, lambda a, b: {
    "model": a.model, "weights": a.extra["weights"], "results": [r.to_dict() for r in a.results]})
DETECT = Handler(schemas.DetectRequest, lambda e, b, before: e.detect(
    b.texts, truncate=b.truncate, before_shutdown=before), lambda a, b: {
    "model": a.model, "results": [r.to_dict(per_token=b.per_token) for r in a.results]})
CLASSIFY = Handler(schemas.ClassifyRequest, lambda e, b, before: e.classify(
    b.model, texts=b.texts, pairs=None if b.pairs is None else [tuple(p) for p in b.pairs], truncate=b.truncate,
    before_shutdown=before), _results, scorer=False)


async def health(request: Request) -> Response:
    lifecycle = request.app.state.lifecycle
    if lifecycle.error is not None:
        return _json({"status": "failed", "error": str(lifecycle.error)}, 503, retry_headers(NotReady.retry_after_s))
    return _json({"status": "ok"})


async def ready(request: Request) -> Response:
    lifecycle = request.app.state.lifecycle
    if lifecycle.ready:
        return _json({"status": "ok"})
    status = lifecycle.status()
    request.state.error_type = "not_ready"
    return _json({"error": f"not ready: {status}", "error_type": "not_ready", "status": status}, 503,
                 retry_headers(NotReady.retry_after_s))


async def info(request: Request) -> Response:
    """The engine's info; Unauthorized (401) without the API key."""
    intake.require_key(request.app.state.settings.api_key, request.headers.get("authorization", ""), intake.HTTP_KEY)
    return _json(_engine(request).info())


async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Route:
    """A route of the API: the endpoint HttpRouter calls for a request of `method` to `path`, and what /openapi.json
    says of it."""

    method: str
    path: str
    endpoint: Endpoint
    response: type[BaseModel] | None  # the schema of its 200 body; None: a body that is not JSON (/metrics)
    tag: str
    summary: str
    responses: Mapping[int | str, dict[str, Any]] = field(default_factory=dict)  # other statuses, as FastAPI's
    body: type[BaseModel] | None = None  # the schema of its request body

    @classmethod
    def scoring(cls, path: str, handler: Handler, response: type[BaseModel], tag: str, summary: str) -> Route:
        """A scoring POST: `answer` with `handler`, whose schema is the body's."""
        return cls("POST", path, functools.partial(answer, handler), response, tag, summary,
                   schemas.ERROR_RESPONSES, handler.schema)

    def documented(self) -> APIRoute:
        """The route as FastAPI documents it, for get_openapi only (no app routes it); its operation id is
        FastAPI's, named after the path's last part (`score_v1_score_post`)."""
        route = APIRoute(self.path, self.endpoint, methods=[self.method], name=self.path.rpartition("/")[2],
                         response_model=self.response, response_class=JSONResponse if self.response else Response,
                         responses=dict(self.responses), tags=[self.tag], summary=self.summary,
                         openapi_extra=None if self.body is None else _request_body(self.body))
        route.description = ""  # FastAPI's default, the endpoint's docstring, is for this code's readers
        return route


ROUTES = (  # the API, in the order /docs lists it
    Route.scoring("/v1/score", SCORE, schemas.ScoreResponse, "scoring",
                  "Electric pseudo-log-likelihood of each text"),
    Route.scoring("/v1/rerank", RERANK, schemas.RerankResponse, "scoring", "Reorder n-best lists: first-pass score "
                  "(or -beta * rank with prior rank) + lm * PLL + length * words"),
    Route.scoring("/v1/detect", DETECT, schemas.DetectResponse, "detection",
                  "ELECTRA replaced-token probability per token and word"),
    Route.scoring("/v1/classify", CLASSIFY, schemas.ClassifyResponse, "classification",
                  "Label probabilities, a regression value or token labels from a fine-tuned model"),
    Route("GET", "/health", health, schemas.Status, "operations", "The process is alive"),
    Route("GET", "/ready", ready, schemas.Status, "operations",
          "Models loaded and warmed up (503 while loading or shutting down)", {503: {"model": schemas.ErrorResponse}}),
    Route("GET", "/info", info, schemas.InfoResponse, "operations", "Models, limits, execution providers and version"),
    Route("GET", "/metrics", metrics, None, "operations", "Prometheus metrics"),
)


def _request_body(schema: type[BaseModel]) -> dict:
    """The OpenAPI requestBody of a scoring route: its schema, added to the components by add_openapi (FastAPI
    documents only the bodies it parses itself)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{schema.__name__}"}}}}}


def add_error_handlers(app: FastAPI) -> None:
    """FastAPI's refusals of what it routes (the pages; unknown paths), as http_error writes them."""

    @app.exception_handler(StarletteHTTPException)
    async def routing_error(request: Request, exc: StarletteHTTPException) -> Response:
        return http_error(request.scope, exc.status_code, exc.detail, exc.headers)  # 405: its Allow


INPUT_TEXTS = {"ScoreRequest": ("texts",), "DetectRequest": ("texts",), "RerankRequest": ("hypotheses",),
               "NBestListBody": ("hypotheses",), "ClassifyRequest": ("texts", "pairs")}  # what max_input_chars limits


def add_openapi(app: FastAPI, routes: Sequence[Route], settings: Settings) -> None:
    """/openapi.json (served by FastAPI) documents `routes`: FastAPI writes each one's path item (Route.documented),
    the request bodies' schemas are added from server/schemas.py, and every input text has the server's
    `max_input_chars` as its maxLength (a setting, so not in the static schemas; the engine checks it, for HTTP and
    gRPC alike). Written once, when first asked for."""

    def limit(schema: object) -> None:
        if isinstance(schema, dict):
            if schema.get("type") == "string":
                schema["maxLength"] = settings.max_input_chars
            for sub in schema.values():
                limit(sub)
        elif isinstance(schema, list):
            for sub in schema:
                limit(sub)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, openapi_version=app.openapi_version,
                             description=app.description, routes=[r.documented() for r in routes])
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for route in routes:
            if route.body is None:
                continue
            body = route.body.model_json_schema(ref_template="#/components/schemas/{model}")
            for model in (*body.pop("$defs", {}).values(), body):
                for prop in model.get("properties", {}).values():
                    if prop.get("default", 0) is None:
                        del prop["default"]  # as FastAPI writes an optional field
                components[model["title"]] = model
        for name, fields in INPUT_TEXTS.items():
            for f in fields:
                limit(components.get(name, {}).get("properties", {}).get(f))
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to replace the schema
