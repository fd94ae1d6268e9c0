"""HTTP transport (FastAPI): the app's routes, converting JSON to engine calls and engine answers to JSON, and
their error handlers. Nothing else.

Errors are mapped here, once: the core's `ServerError` types -> an HTTP status by `HTTP_STATUS` and the body
`{error, error_type}`; FastAPI's request validation -> 422 naming the field; unknown routes -> 404; a wrong
method -> 405 with an `Allow` header; a body that cannot be read -> 400 `http_error`.

A scoring POST has one path, `answer`: the checks of server/intake.py (the key, the body, the input count, the
schema), then its route's `Handler`. Its FastAPI route calls it, and so does `ObservabilityMiddleware`
(server/http_middleware.py) directly, skipping FastAPI's routing, for every POST to a scoring route. The middleware
also counts and logs every response once, failures included, and answers what escapes the routes by the same table
(anything unexpected -> 500 `backend_error` without a traceback, which is logged; a request cut by the end of the
shutdown grace -> 503 `shutting_down`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
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
    """`err` as HTTP answers it: its status by HTTP_STATUS, the body `{error, error_type}`, its headers."""
    return _json(err.body(), status_for(HTTP_STATUS, err), err.headers() or None)


def _error(request: Request, err: ServerError) -> Response:
    request.state.error_type = err.error_type
    return error_response(err)


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


async def require_api_key(request: Request) -> None:
    intake.require_key(request.app.state.settings.api_key, request.headers.get("authorization", ""), intake.HTTP_KEY)


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
    """The one way a scoring POST is answered, by its FastAPI route and by the middleware alike: the API key first
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


HANDLERS = {
    "/v1/score": Handler(schemas.ScoreRequest, lambda e, b, before: e.score(
        b.texts, per_token=b.per_token, truncate=b.truncate, before_shutdown=before), _results),
    "/v1/rerank": Handler(schemas.RerankRequest, _rerank, lambda a, b: {
        "model": a.model, "weights": a.extra["weights"], "results": [r.to_dict() for r in a.results]}),
    "/v1/detect": Handler(schemas.DetectRequest, lambda e, b, before: e.detect(
        b.texts, truncate=b.truncate, before_shutdown=before), lambda a, b: {
        "model": a.model, "results": [r.to_dict(per_token=b.per_token) for r in a.results]}),
    "/v1/classify": Handler(schemas.ClassifyRequest, lambda e, b, before: e.classify(
        b.model, texts=b.texts, pairs=None if b.pairs is None else [tuple(p) for p in b.pairs], truncate=b.truncate,
        before_shutdown=before), _results, scorer=False),
}


SCORING_ROUTES = {  # path: (response schema, tag, summary) for /docs
    "/v1/score": (schemas.ScoreResponse, "scoring", "Electric pseudo-log-likelihood of each text"),
    "/v1/rerank": (schemas.RerankResponse, "scoring", "Reorder n-best lists: first-pass score (or -beta * rank with "
                                                      "prior rank) + lm * PLL + length * words"),
    "/v1/detect": (schemas.DetectResponse, "detection", "ELECTRA replaced-token probability per token and word"),
    "/v1/classify": (schemas.ClassifyResponse, "classification",
                     "Label probabilities, a regression value or token labels from a fine-tuned model"),
}


def add_routes(app: FastAPI) -> None:
    auth = [Depends(require_api_key)]

    for path, (response, tag, summary) in SCORING_ROUTES.items():
        app.post(path, response_model=response, responses=schemas.ERROR_RESPONSES, tags=[tag], summary=summary,
                 name=path.rpartition("/")[2], openapi_extra=_request_body(HANDLERS[path].schema))(
            _endpoint(HANDLERS[path]))

    @app.get("/health", response_model=schemas.Status, tags=["operations"], summary="The process is alive")
    async def health(request: Request) -> Response:
        engine = _engine(request)
        if engine.failed is not None:
            return _json({"status": "failed", "error": str(engine.failed)}, 503)
        return _json({"status": "ok"})

    @app.get("/ready", response_model=schemas.Status, responses={503: {"model": schemas.ErrorResponse}},
             tags=["operations"], summary="Models loaded and warmed up (503 while loading or shutting down)")
    async def ready(request: Request) -> Response:
        engine = _engine(request)
        if engine.ready:
            return _json({"status": "ok"})
        status = "shutting_down" if engine.draining else "failed" if engine.failed else "loading"
        request.state.error_type = "not_ready"
        return _json({"error": f"not ready: {status}", "error_type": "not_ready", "status": status}, 503)

    @app.get("/info", response_model=schemas.InfoResponse, dependencies=auth, tags=["operations"],
             summary="Models, limits, execution providers and version")
    async def info(request: Request) -> Response:
        return _json(_engine(request).info())

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics", response_class=Response)
    async def metrics(request: Request) -> Response:
        return Response(request.app.state.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A scoring route's FastAPI endpoint: `answer` (the request's body is read and checked there, not by
    FastAPI; /docs learns its schema from `_request_body`)."""

    async def endpoint(request: Request) -> Response:
        return await answer(handler, request)

    return endpoint


def _request_body(schema: type[BaseModel]) -> dict:
    """The OpenAPI requestBody of a scoring route: its schema, added to the components by add_input_limits_to_openapi
    (FastAPI documents only the bodies it parses itself)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{schema.__name__}"}}}}}


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServerError)
    async def server_error(request: Request, exc: ServerError) -> Response:
        return _error(request, exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        return _error(request, ValidationError(intake.describe_errors(exc.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if isinstance(exc.__cause__, ServerError):  # e.g. PayloadTooLarge raised while FastAPI read the body
            return _error(request, exc.__cause__)
        kind = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}.get(exc.status_code,
                                                                                        "http_error")
        request.state.error_type = kind
        return _json({"error": str(exc.detail), "error_type": kind}, exc.status_code, exc.headers)  # 405: Allow

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        request.state.error_type = "client_closed"
        return Response(status_code=499)


INPUT_TEXTS = {"ScoreRequest": ("texts",), "DetectRequest": ("texts",), "RerankRequest": ("hypotheses",),
               "NBestListBody": ("hypotheses",), "ClassifyRequest": ("texts", "pairs")}  # what max_input_chars limits


def add_input_limits_to_openapi(app: FastAPI, settings: Settings) -> None:
    """/openapi.json gives every input text the server's `max_input_chars` as its maxLength (a setting, so not in
    the static schemas; the engine checks it, for HTTP and gRPC alike)."""
    build = app.openapi

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
        schema = build()  # FastAPI's own, which keeps it as app.openapi_schema
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for handler in HANDLERS.values():  # the scoring routes' request bodies (_request_body)
            body = handler.schema.model_json_schema(ref_template="#/components/schemas/{model}")
            for model in (*body.pop("$defs", {}).values(), body):
                for field in model.get("properties", {}).values():
                    if field.get("default", 0) is None:
                        del field["default"]  # as FastAPI writes an optional field
                components[model["title"]] = model
        for name, fields in INPUT_TEXTS.items():
            for f in fields:
                limit(components.get(name, {}).get("properties", {}).get(f))
        return schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema
