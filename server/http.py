"""HTTP transport (FastAPI): converts JSON to engine calls and engine answers to JSON. Nothing else.

Errors are mapped here, once: the core's `ServerError` types -> an HTTP status by `HTTP_STATUS` and the body
`{error, error_type}`; FastAPI's request validation -> 422 naming the field; unknown routes -> 404; a wrong
method -> 405 with an `Allow` header; a body that cannot be read -> 400 `http_error`; anything unexpected -> 500
`backend_error` without a traceback (it is logged); a request cut by the end of the shutdown grace ->
503 `shutting_down`. Every response, failures included, is counted and logged once.

A valid, authorised JSON POST to a scoring route is answered by ObservabilityMiddleware's fast path with the
route's `_Handler`, skipping FastAPI's routing and dependency machinery; FastAPI answers everything else.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from server import schemas
from server.engine import Answer, Engine
from server.errors import (
    BackendError,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    ServerError,
    ShuttingDown,
    Timeout,
    Unauthorized,
    ValidationError,
)
from server.prometheus import Metrics
from server.settings import Settings
from server.transport import authorised, record, status_for, timing_metadata

log = logging.getLogger("electric.server")

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

QUIET_PATHS = ("/health", "/ready", "/metrics")  # probes: counted, not logged


class ClientGone(Exception):
    """The HTTP client disconnected before its answer was ready (logged as status 499)."""


def _engine(request: Request) -> Engine:
    return request.app.state.engine


def _dumps(data: object) -> bytes:
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
    return Response(_dumps(data), status_code=status, headers=headers, media_type="application/json")


def _error(request: Request, err: ServerError) -> Response:
    request.state.error_type = err.error_type
    return _json(err.body(), status_for(HTTP_STATUS, err))


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
class _Handler:
    """A scoring route's request schema, engine call and response body: one home, used by its FastAPI endpoint
    (which gives /docs the schemas and answers every client mistake) and by ObservabilityMiddleware's fast path."""

    schema: type[BaseModel]
    call: Callable[[Engine, Any], Awaitable[Answer]]
    render: Callable[[Answer, Any], dict]


def _rerank(engine: Engine, body: schemas.RerankRequest) -> Awaitable[Answer]:
    weights = body.weights.model_dump(exclude_none=True) if body.weights else None
    return engine.rerank(body.as_lists(), weights=weights, truncate=body.truncate)


def _results(a: Answer, body) -> dict:
    return {"model": a.model, "results": [r.to_dict() for r in a.results]}


HANDLERS = {
    "/v1/score": _Handler(schemas.ScoreRequest,
                          lambda e, b: e.score(b.texts, per_token=b.per_token, truncate=b.truncate), _results),
    "/v1/rerank": _Handler(schemas.RerankRequest, _rerank, lambda a, b: {
        "model": a.model, "weights": a.extra["weights"], "results": [r.to_dict() for r in a.results]}),
    "/v1/detect": _Handler(schemas.DetectRequest, lambda e, b: e.detect(b.texts, truncate=b.truncate),
                           lambda a, b: {"model": a.model,
                                         "results": [r.to_dict(per_token=b.per_token) for r in a.results]}),
    "/v1/classify": _Handler(schemas.ClassifyRequest, lambda e, b: e.classify(
        b.model, texts=b.texts, pairs=None if b.pairs is None else [tuple(p) for p in b.pairs], truncate=b.truncate),
        _results),
}


async def _answer(request: Request, handler: _Handler, body) -> Response:
    a = await _call(request, handler.call(_engine(request), body))
    return _json(handler.render(a, body), headers=dict(timing_metadata(a.timing, sizes=True)))


def add_routes(app: FastAPI) -> None:
    app.router.route_class = Utf8JsonRoute  # JSON bodies in UTF-8 only (json_text), as on the fast path
    auth = [Depends(require_api_key)]

    @app.post("/v1/score", response_model=schemas.ScoreResponse, responses=schemas.ERROR_RESPONSES,
              dependencies=auth, tags=["scoring"], summary="Electric pseudo-log-likelihood of each text")
    async def score(body: schemas.ScoreRequest, request: Request) -> Response:
        return await _answer(request, HANDLERS["/v1/score"], body)

    @app.post("/v1/rerank", response_model=schemas.RerankResponse, responses=schemas.ERROR_RESPONSES,
              dependencies=auth, tags=["scoring"],
              summary="Reorder n-best lists: first-pass score (or -beta * rank with prior rank) + lm * PLL + "
                      "length * words")
    async def rerank(body: schemas.RerankRequest, request: Request) -> Response:
        return await _answer(request, HANDLERS["/v1/rerank"], body)

    @app.post("/v1/detect", response_model=schemas.DetectResponse, responses=schemas.ERROR_RESPONSES,
              dependencies=auth, tags=["detection"], summary="ELECTRA replaced-token probability per token and word")
    async def detect(body: schemas.DetectRequest, request: Request) -> Response:
        return await _answer(request, HANDLERS["/v1/detect"], body)

    @app.post("/v1/classify", response_model=schemas.ClassifyResponse, responses=schemas.ERROR_RESPONSES,
              dependencies=auth, tags=["classification"],
              summary="Label probabilities, a regression value or token labels from a fine-tuned model")
    async def classify(body: schemas.ClassifyRequest, request: Request) -> Response:
        return await _answer(request, HANDLERS["/v1/classify"], body)

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
        message = _describe(exc.errors())
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


def _describe(errors: list[dict]) -> str:
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


INPUT_LISTS = ("texts", "pairs", "hypotheses", "scores", "lists")  # a body's lists of inputs, counted first


def _check_counts(engine: Engine, body: object) -> None:
    """PayloadTooLarge when a parsed body's lists of inputs (texts, pairs, hypotheses, scores, lists, and the
    hypotheses and scores of its lists) are longer than max_inputs_per_request, from their lengths alone: before
    validation looks at any element, so `{"texts": [0, 0, ...]}` costs what parsing it cost."""
    if not isinstance(body, dict):
        return
    for name in INPUT_LISTS:
        if isinstance(body.get(name), list):
            engine.check_count(len(body[name]), name)
    if isinstance(body.get("lists"), list):  # at most max_inputs_per_request of them by now
        for name in ("hypotheses", "scores"):
            engine.check_count(sum(len(x[name]) for x in body["lists"]
                                   if isinstance(x, dict) and isinstance(x.get(name), list)), name)


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


def fast_routes(app: FastAPI) -> dict[str, APIRoute]:
    """The POST routes of HANDLERS, by path: what ObservabilityMiddleware may answer without FastAPI."""
    return {r.path: r for r in app.routes if isinstance(r, APIRoute) and r.path in HANDLERS and "POST" in r.methods}


class ObservabilityMiddleware:
    """Pure ASGI: body-size limit (413), per-request metrics, x-total-time header, one JSON log line - for every
    response, including the ones it writes itself for what escaped FastAPI's handlers: an unexpected exception
    (500 `backend_error`, logged with its traceback) and uvicorn cancelling a request that still runs when the
    shutdown grace is over (503 `shutting_down`).

    Fast path: a JSON POST to a route of `routes` that carries the API key and whose body is valid is answered
    here, with the route's `_Handler` (as its FastAPI endpoint answers it), without FastAPI's routing, dependency
    and exception machinery - most of the event loop's time per request. A POST to such a route without the key
    is answered 401 here (before its body is read), a body that is not UTF-8 or nests too deeply to parse 400
    (json.loads' RecursionError), one whose lists hold more inputs than max_inputs_per_request 413 (from their
    lengths, before validation), and one that does not validate 422 (as FastAPI words it); any other request, and
    a body that is not JSON, goes to FastAPI with the messages read so far, so every other client mistake is
    answered by FastAPI as before."""

    def __init__(self, app, settings: Settings, metrics: Metrics, routes: dict[str, APIRoute] | None = None):
        self.app, self.settings, self.metrics = app, settings, metrics
        self.routes = routes or {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0 = time.perf_counter()
        limit = self.settings.max_body_bytes
        state = scope.setdefault("state", {})
        status = {"code": 0}  # set when the response starts
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLarge(f"request body over the limit of {limit} bytes")
            return message

        async def timed_send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-total-time", f"{(time.perf_counter() - t0) * 1e3:.3f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        async def fail(err: ServerError) -> None:
            state["error_type"] = err.error_type
            if status["code"]:  # too late for an error body: the client sees a cut response
                status["code"] = 500
            else:
                await _send_json(timed_send, status_for(HTTP_STATUS, err), err.body())

        length = _header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await fail(PayloadTooLarge(f"request body of {int(length)} bytes is over the limit of {limit} bytes"))
        else:
            try:
                seen = await self._fast(scope, limited_receive, timed_send)
                if seen is not None:
                    await self.app(scope, _replay(seen, limited_receive), timed_send)
            except asyncio.CancelledError:  # only uvicorn cancels a request: FLUSH_S after the shutdown grace
                asyncio.current_task().uncancel()
                await fail(ShuttingDown.after_grace(self.settings.shutdown_grace_s))
            except Exception as e:  # noqa: BLE001 - typed errors as they are, anything else without a traceback
                err = e if isinstance(e, ServerError) else None
                if err is None:
                    log.error("unexpected error on %s: %s", scope.get("path"), e, exc_info=e)
                    err = BackendError(f"internal error ({type(e).__name__})")
                await fail(err)
        self._record(scope, state, status["code"] or 500, time.perf_counter() - t0)  # 0: uvicorn answers 500

    async def _fast(self, scope, receive, send) -> list[dict] | None:
        """Answer the request on the fast path (None), or give back the messages read for FastAPI to replay.
        On a scoring route, a request without the API key is answered 401 before its body is read
        (authentication first), and a JSON body that is not UTF-8 or nests too deeply for the parser is a 400
        naming the problem."""
        seen: list[dict] = []
        route = self.routes.get(scope["path"]) if scope["method"] == "POST" else None
        if route is None or scope["app"].state.engine is None:
            return seen
        ctype, auth = _header(scope, b"content-type") or b"", _header(scope, b"authorization") or b""
        if not authorised(self.settings.api_key, auth.decode("latin-1")):
            scope["route"] = route
            err = Unauthorized("missing or wrong API key: send \"Authorization: Bearer KEY\"")
            scope["state"]["error_type"] = err.error_type
            await _send_json(send, status_for(HTTP_STATUS, err), err.body())
            return None
        if ctype.partition(b";")[0].strip().lower() != b"application/json":
            return seen
        chunks = []
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] != "http.request":
                return seen  # the client went away: FastAPI answers as it always has
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        handler = HANDLERS[route.path]
        problem = None
        scope["route"] = route
        try:
            data = json.loads(json_text(b"".join(chunks)))
            _check_counts(scope["app"].state.engine, data)  # 413 from the lists' lengths, before any element is read
            body = handler.schema.model_validate(data)  # as FastAPI's routes do, one error at most a list (fail_fast)
        except StarletteHTTPException as e:  # not UTF-8
            problem = e.detail
        except RecursionError:
            problem = "the body nests JSON arrays or objects too deeply to parse"
        except PydanticValidationError as e:  # answered here, as FastAPI would: not parsed and validated again
            raise ValidationError(_describe(e.errors(include_url=False, include_input=False))) from None
        except ValueError:  # json.JSONDecodeError: FastAPI answers, saying where
            return seen
        if problem is not None:
            scope["state"]["error_type"] = "http_error"
            await _send_json(send, 400, {"error": problem, "error_type": "http_error"})
            return None
        try:
            response = await _answer(Request(scope, receive), handler, body)
        except ClientGone:
            scope["state"]["error_type"] = "client_closed"
            response = Response(status_code=499)
        await response(scope, receive, send)
        return None

    def _record(self, scope, state: dict, code: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        error_type = (state.get("error_type") or "http_error") if code >= 400 else None
        record(self.metrics, self.settings, "http", route, code, error_type, seconds, state.get("timing"),
               client=(scope.get("client") or ("", 0))[0], log=route not in QUIET_PATHS)


def _header(scope, name: bytes) -> bytes | None:
    """The first value of a (lower-case) header, as starlette's Headers.get finds it."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return value
    return None


def _replay(messages: list[dict], receive):
    """`receive` that first gives back `messages` (already read by the fast path)."""
    pending = list(messages)

    async def replayed():
        return pending.pop(0) if pending else await receive()

    return replayed


async def _send_json(send, status: int, body: dict) -> None:
    data = _dumps(body)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})

