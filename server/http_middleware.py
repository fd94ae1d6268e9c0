"""The HTTP middleware in front of FastAPI's routes (server/http.py): the body-size limit, one count and one
access-log line for every response, and the fast path for scoring requests.

    app.add_middleware(ObservabilityMiddleware, settings=settings, metrics=metrics, routes=fast_routes(app))

The fast path answers a valid, authorised JSON POST to a scoring route with the route's own `Handler`
(server.http.HANDLERS), as its FastAPI endpoint would, without FastAPI's routing, dependency and exception
machinery; errors map to statuses by the transport's one table, server.http.HTTP_STATUS.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import ValidationError as PydanticValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Mount

from server.engine import Engine
from server.errors import (
    BackendError,
    PayloadTooLarge,
    ServerError,
    ShuttingDown,
    Unauthorized,
    ValidationError,
)
from server.http import HANDLERS, HTTP_STATUS, ClientGone, describe_errors, json_bytes, json_text
from server.prometheus import Metrics
from server.settings import Settings
from server.transport import authorised, record, status_for

log = logging.getLogger("electric.server")

QUIET_PATHS = ("/health", "/ready", "/metrics")  # probes: counted, not logged
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


def fast_routes(app: FastAPI) -> dict[str, APIRoute]:
    """The POST routes of HANDLERS, by path: what ObservabilityMiddleware may answer without FastAPI."""
    return {r.path: r for r in app.routes if isinstance(r, APIRoute) and r.path in HANDLERS and "POST" in r.methods}


class ObservabilityMiddleware:
    """Pure ASGI: body-size limit (413), per-request metrics, x-total-time header, one JSON log line - for every
    response, including the ones it writes itself for what escaped FastAPI's handlers: an unexpected exception
    (500 `backend_error`, logged with its traceback) and uvicorn cancelling a request that still runs when the
    shutdown grace is over (503 `shutting_down`).

    Fast path: a JSON POST to a route of `routes` that carries the API key and whose body is valid is answered
    here, with the route's `Handler` (as its FastAPI endpoint answers it), without FastAPI's routing, dependency
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
                await _send_json(timed_send, status_for(HTTP_STATUS, err), err.body(), err.headers())

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
        (authentication first), a big body while the model is already behind its deadline 429 before it is read
        (Engine.refuse_big_body), and a JSON body that is not UTF-8 or nests too deeply for the parser is a 400
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
            await _send_json(send, status_for(HTTP_STATUS, err), err.body(), err.headers())
            return None
        length = _header(scope, b"content-length") or b""
        busy = scope["app"].state.engine.refuse_big_body(route.path, int(length)) if length.isdigit() else None
        if busy is not None:  # refused before its body is read: a refused megabyte costs what its headers did
            scope["route"] = route
            scope["state"]["error_type"] = busy.error_type
            await _send_json(send, status_for(HTTP_STATUS, busy), busy.body(), busy.headers())
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
            raise ValidationError(describe_errors(e.errors(include_url=False, include_input=False))) from None
        except ValueError:  # json.JSONDecodeError: FastAPI answers, saying where
            return seen
        if problem is not None:
            scope["state"]["error_type"] = "http_error"
            await _send_json(send, 400, {"error": problem, "error_type": "http_error"})
            return None
        try:
            response = await handler.respond(Request(scope, receive), body)
        except ClientGone:
            scope["state"]["error_type"] = "client_closed"
            response = Response(status_code=499)
        await response(scope, receive, send)
        return None

    def _record(self, scope, state: dict, code: int, seconds: float) -> None:
        route = route_name(scope)
        error_type = (state.get("error_type") or "http_error") if code >= 400 else None
        record(self.metrics, self.settings, "http", route, code, error_type, seconds, state.get("timing"),
               client=(scope.get("client") or ("", 0))[0], log=route not in QUIET_PATHS)


def route_name(scope) -> str:
    """What the access log and the metrics call a request's route: the path of the route that answered it
    (`/v1/score`, `/docs`, `/`, `/openapi.json`, `/docs-assets` or `/ui-assets` for any file under that mount),
    else "unmatched" (a 404, or a request refused before routing: never the request's own path, which would make a
    label per URL). FastAPI's router puts its own routes (APIRoute) in scope["route"], and the fast path puts its
    route there; of a plain Starlette route or mount (FastAPI's /openapi.json, the pages' files) the router leaves
    only the endpoint it called, scope["endpoint"]: a Route's endpoint, a Mount's app."""
    route = scope.get("route")
    if route is None and "endpoint" in scope:
        endpoint = scope["endpoint"]
        route = next((r for r in scope["app"].routes
                      if (r.app if isinstance(r, Mount) else getattr(r, "endpoint", None)) is endpoint), None)
    return getattr(route, "path", None) or "unmatched"


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


async def _send_json(send, status: int, body: dict, headers: dict[str, str] | None = None) -> None:
    data = json_bytes(body)
    extra = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *extra]})
    await send({"type": "http.response.body", "body": data})
