"""The HTTP router: every HTTP request comes through `HttpRouter`, the ASGI app in front of FastAPI.

    app.add_middleware(HttpRouter, settings=settings, metrics=metrics, routes=ROUTES)

A request whose path is a route of the API (server.http.ROUTES) is answered by that route's endpoint, or 405 when
its method is not the route's (with a trailing slash: 307 to the path without it, as FastAPI redirects); any other (the pages, their files, an unknown path) goes to FastAPI. Around both: the
body-size limit, the x-total-time header, one count and one access-log line for every response, and the answers
for what escapes an endpoint, by the transport's one table, server.http.HTTP_STATUS.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from fastapi import Request
from fastapi.responses import RedirectResponse
from starlette.datastructures import URL
from starlette.routing import Mount

from server.errors import BackendError, PayloadTooLarge, ServerError, ShuttingDown
from server.http import Route, content_length, error_response, http_error, uncancel
from server.http_protocol import BODY_TIMEOUT
from server.prometheus import Metrics
from server.settings import Settings
from server.transport import record

log = logging.getLogger("electric.server")

QUIET_PATHS = ("/health", "/ready", "/metrics")  # probes: counted, not logged


class HttpRouter:
    """Pure ASGI, for every HTTP request: a route of `routes` is answered by its endpoint (another method: 405 with
    `Allow`), anything else by FastAPI (`app`). For every response: the body-size limit (413), the x-total-time
    header, one count and one JSON log line, including the responses it writes itself for what escaped: a
    ServerError by HTTP_STATUS, anything unexpected 500 `backend_error` (logged with its traceback), and uvicorn
    cancelling a request that still runs when the shutdown grace is over 503 `shutting_down`."""

    def __init__(self, app, settings: Settings, metrics: Metrics, routes: Iterable[Route]):
        self.app, self.settings, self.metrics = app, settings, metrics
        self.paths: dict[str, dict[str, Route]] = {}  # path -> method -> route
        for route in routes:
            self.paths.setdefault(route.path, {})[route.method] = route

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
                await error_response(err)(scope, receive, timed_send)

        length = content_length(scope)
        if length is not None and length > limit:
            await fail(PayloadTooLarge(f"request body of {length} bytes is over the limit of {limit} bytes"))
        else:
            try:
                path = route_path(scope)
                methods = self.paths.get(path)
                if methods is None and path.endswith("/") and path.rstrip("/") in self.paths:
                    # as FastAPI answers a route's path with a trailing slash: 307 to the path without it
                    redirect = RedirectResponse(str(URL(scope={**scope, "path": scope["path"].rstrip("/")})))
                    await redirect(scope, limited_receive, timed_send)
                elif methods is None:
                    await self.app(scope, limited_receive, timed_send)
                else:
                    route = methods.get(scope["method"])
                    if route is None:  # a known path, another method: counted under the path's route
                        scope["route"] = next(iter(methods.values()))
                        response = http_error(scope, 405, "Method Not Allowed", {"Allow": ", ".join(methods)})
                    else:
                        scope["route"] = route  # what the metrics and the access log call it (route_name)
                        response = await route.endpoint(Request(scope, limited_receive))
                    await response(scope, limited_receive, timed_send)
            except asyncio.CancelledError:  # only uvicorn cancels a request: FLUSH_S after the shutdown grace
                task = asyncio.current_task()
                assert task is not None  # this coroutine runs in the request's task
                uncancel(task)
                await fail(ShuttingDown.after_grace(self.settings.shutdown_grace_s))
            except Exception as e:  # noqa: BLE001 - typed errors as they are, anything else without a traceback
                err = e if isinstance(e, ServerError) else None
                if err is None:
                    log.error("unexpected error on %s: %s", scope.get("path"), e, exc_info=e)
                    err = BackendError(f"internal error ({type(e).__name__})")
                await fail(err)
        self._record(scope, state, status["code"] or 500, time.perf_counter() - t0)  # 0: uvicorn answers 500

    def _record(self, scope, state: dict, code: int, seconds: float) -> None:
        if state.get(BODY_TIMEOUT):  # the connection answered it 408 and closed (server/http_protocol.py)
            code, state["error_type"] = 408, BODY_TIMEOUT
        route = route_name(scope)
        error_type = (state.get("error_type") or "http_error") if code >= 400 else None
        record(self.metrics, self.settings, "http", route, code, error_type, seconds, state.get("timing"),
               client=(scope.get("client") or ("", 0))[0], log=route not in QUIET_PATHS)


def route_path(scope) -> str:
    """The request's path below the app's root path (`--root-path` behind a proxy that keeps the prefix): what a
    route's path is matched against, as FastAPI's router matches its own."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root):len(root) + 1] in ("/", ""):
        return path[len(root):]
    return path


def route_name(scope) -> str:
    """What the access log and the metrics call a request's route: the path of the route that answered it
    (`/v1/score`, `/docs`, `/`, `/openapi.json`, `/docs-assets` or `/ui-assets` for any file under that mount),
    else "unmatched" (a 404, or a request refused before routing: never the request's own path, which would make a
    label per URL). HttpRouter puts the API's route (server.http.Route) in scope["route"], and FastAPI's router puts
    its own routes there (APIRoute: the pages); of a plain Starlette route or mount (FastAPI's /openapi.json, the
    pages' files) FastAPI's router leaves only the endpoint it called, scope["endpoint"]: a Starlette Route's
    endpoint, a Mount's app."""
    route = scope.get("route")
    if route is None and "endpoint" in scope:
        endpoint = scope["endpoint"]
        route = next((r for r in scope["app"].routes
                      if (r.app if isinstance(r, Mount) else getattr(r, "endpoint", None)) is endpoint), None)
    return getattr(route, "path", None) or "unmatched"
