"""HTTP transport (FastAPI): the app's routes, converting JSON to engine calls and engine answers to JSON, and
their error handlers. Nothing else.

Errors are mapped here, once: the core's `ServerError` types -> an HTTP status by `HTTP_STATUS` and the body
`{error, error_type}`; FastAPI's request validation -> 422 naming the field; unknown routes -> 404; a wrong
method -> 405 with an `Allow` header; a body that cannot be read -> 400 `http_error`.

In front of the routes, `ObservabilityMiddleware` (server/http_middleware.py) counts and logs every response once,
failures included; answers what escapes them by the same table (anything unexpected -> 500 `backend_error` without
a traceback, which is logged; a request cut by the end of the shutdown grace -> 503 `shutting_down`); and answers a
valid, authorised JSON POST to a scoring route itself (the fast path) with the route's `Handler`, skipping
FastAPI's routing and dependency machinery. FastAPI answers everything else.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from server import schemas
from server.engine import Answer, Engine
from server.errors import (
    BackendError,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    ServerError,
    Timeout,
    Unauthorized,
    ValidationError,
)
from server.settings import Settings
from server.transport import authorised, status_for, timing_metadata

# the core's errors -> HTTP status (a subclass not listed takes its nearest listed base's: ShuttingDown -> 503)
HTTP_STATUS: dict[type[ServerError], int] = {
    ServerError: 500,
    ValidationError: 422,
    PayloadTooLarge: 413,
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


def json_text(body: bytes) -> str:
    """A JSON body's text: UTF-8, with or without a byte-order mark (RFC 8259 has JSON exchanged in UTF-8; the BOM
    is tolerated, as it allows). Anything else - UTF-16 or UTF-32 with or without a BOM, Latin-1 - is a 400 naming the
    problem: one rule for the fast path and for FastAPI's routes (`Utf8JsonRoute`), where `json.loads(bytes)` would
    take UTF-16 and -32."""
    encoding = json.detect_encoding(body)
    if encoding not in ("utf-8", "utf-8-sig"):
        raise StarletteHTTPException(400, f"the body is {encoding.upper()}, not UTF-8; send JSON in UTF-8")
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise StarletteHTTPException(400, f"the body is not UTF-8 (byte {e.start}: {e.object[e.start:e.start + 1]!r}); "
                                          "send JSON in UTF-8") from None


class Utf8JsonRequest(Request):
    """A request whose JSON body is read by `json_text`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(json_text(await self.body()))
        return self._json


class Utf8JsonRoute(APIRoute):
    """A FastAPI route that parses its JSON body with `Utf8JsonRequest` (FastAPI passes on the 400 it raises)."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def utf8_json_handler(request: Request) -> Response:
            return await handler(Utf8JsonRequest(request.scope, request.receive))

        return utf8_json_handler


def _json(data: object, status: int = 200, headers: dict | None = None) -> Response:
    return Response(json_bytes(data), status_code=status, headers=headers, media_type="application/json")


def _error(request: Request, err: ServerError) -> Response:
    request.state.error_type = err.error_type
    return _json(err.body(), status_for(HTTP_STATUS, err), err.headers() or None)


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
        task.uncancel()
        raise ClientGone() from None
    finally:
        armed = False
        watch.cancel()
    request.state.timing = answer.timing
    return answer


async def require_api_key(request: Request) -> None:
    if not authorised(request.app.state.settings.api_key, request.headers.get("authorization", "")):
        raise Unauthorized("missing or wrong API key: send \"Authorization: Bearer KEY\"")


@dataclass(frozen=True)
class Handler:
    """A scoring route's request schema, engine call and response body: one home, used by its FastAPI endpoint
    (which gives /docs the schemas and answers every client mistake) and by ObservabilityMiddleware's fast path."""

    schema: type[BaseModel]
    call: Callable[[Engine, Any], Awaitable[Answer]]
    render: Callable[[Answer, Any], dict]

    async def respond(self, request: Request, body) -> Response:
        """Call the engine with a validated `body` and render its answer as JSON, with the timing headers."""
        a = await _call(request, self.call(_engine(request), body))
        return _json(self.render(a, body), headers=dict(timing_metadata(a.timing, sizes=True)))


def _rerank(engine: Engine, body: schemas.RerankRequest) -> Awaitable[Answer]:
    weights = body.weights.model_dump(exclude_none=True) if body.weights else None
    return engine.rerank(body.as_lists(), weights=weights, truncate=body.truncate)


def _results(a: Answer, body) -> dict:
    return {"model": a.model, "results": [r.to_dict() for r in a.results]}


HANDLERS = {
    "/v1/score": Handler(schemas.ScoreRequest,
                          lambda e, b: e.score(b.texts, per_token=b.per_token, truncate=b.truncate), _results),
    "/v1/rerank": Handler(schemas.RerankRequest, _rerank, lambda a, b: {
        "model": a.model, "weights": a.extra["weights"], "results": [r.to_dict() for r in a.results]}),
    "/v1/detect": Handler(schemas.DetectRequest, lambda e, b: e.detect(b.texts, truncate=b.truncate),
                           lambda a, b: {"model": a.model,
                                         "results": [r.to_dict(per_token=b.per_token) for r in a.results]}),
    "/v1/classify": Handler(schemas.ClassifyRequest, lambda e, b: e.classify(
        b.model, texts=b.texts, pairs=None if b.pairs is None else [tuple(p) for p in b.pairs], truncate=b.truncate),
        _results),
}


def add_routes(app: FastAPI) -> None:
    app.router.route_class = Utf8JsonRoute  # JSON bodies in UTF-8 only (json_text), as on the fast path
    auth = [Depends(require_api_key)]

    @app.post("/v1/score", response_model=schemas.ScoreResponse, responses=schemas.ERROR_RESPONSES,
              dependencies=auth, tags=["scoring"], summary="Electric pseudo-log-likelihood of each text")
    async def score(body: schemas.ScoreRequest, request: Request) -> Response:
        return await HANDLERS["/v1/score"].respond(request, body)

    @app.post("/v1/rerank", response_model=schemas.RerankResponse, responses=schemas.ERROR_RESPONSES,
              dependencies=auth, tags=["scoring"],
              summary="Reorder n-best lists: first-pass score (or -beta * rank with prior rank) + lm * PLL + "
                      "length * words")
    async def rerank(body: schemas.RerankRequest, request: Request) -> Response:
        return await HANDLERS["/v1/rerank"].respond(request, body)

    @app.post("/v1/detect", response_model=schemas.DetectResponse, responses=schemas.ERROR_RESPONSES,
              dependencies=auth, tags=["detection"], summary="ELECTRA replaced-token probability per token and word")
    async def detect(body: schemas.DetectRequest, request: Request) -> Response:
        return await HANDLERS["/v1/detect"].respond(request, body)

    @app.post("/v1/classify", response_model=schemas.ClassifyResponse, responses=schemas.ERROR_RESPONSES,
              dependencies=auth, tags=["classification"],
              summary="Label probabilities, a regression value or token labels from a fine-tuned model")
    async def classify(body: schemas.ClassifyRequest, request: Request) -> Response:
        return await HANDLERS["/v1/classify"].respond(request, body)

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


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServerError)
    async def server_error(request: Request, exc: ServerError) -> Response:
        return _error(request, exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        request.state.error_type = "validation_error"
        message = describe_errors(exc.errors())
        ctype = request.headers.get("content-type", "")
        if request.method == "POST" and not ctype.startswith("application/json"):
            message = f"send the body as JSON with \"Content-Type: application/json\" (got {ctype or 'none'!r}); {message}"
        return _json({"error": message, "error_type": "validation_error"}, 422)

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


def describe_errors(errors: list[dict]) -> str:
    """FastAPI's (or pydantic's) error list -> one sentence: `texts[2]: Input should be a valid string; ...`. A list
    gives one error at most, at its first bad element (the request schemas validate lists with fail_fast)."""
    parts = []
    for e in errors[:5]:
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        where = "".join(f"[{x}]" if x.isdigit() else f".{x}" for x in loc).lstrip(".") or "body"
        msg = e.get("msg", "invalid")
        if e.get("type") == "json_invalid":
            msg = f"the body is not valid JSON ({e.get('ctx', {}).get('error', 'parse error')})"
            where = "body"
        elif e.get("type") == "missing":
            msg = "required field missing"
        parts.append(f"{where}: {msg}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more


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

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = build()
            components = schema.get("components", {}).get("schemas", {})
            for name, fields in INPUT_TEXTS.items():
                for f in fields:
                    limit(components.get(name, {}).get("properties", {}).get(f))
        return app.openapi_schema

    app.openapi = openapi
