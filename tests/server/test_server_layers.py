"""Each transport maps every core error to the status code its clients have always seen, from its own table
(that the core imports no transport library is tests/test_imports.py's)."""

from __future__ import annotations

import inspect
import math

import grpc
import pytest

from server import errors
from server.grpc_service import GRPC_STATUS
from server.http import HTTP_STATUS
from server.transport import status_for

# the contract: what clients of both transports have always been answered
EXPECTED = [
    (errors.ValidationError, 422, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.PayloadTooLarge, 413, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.UnreadableBody, 400, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.Unauthorized, 401, grpc.StatusCode.UNAUTHENTICATED),
    (errors.Overloaded, 429, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.NotReady, 503, grpc.StatusCode.UNAVAILABLE),
    (errors.ShuttingDown, 503, grpc.StatusCode.UNAVAILABLE),
    (errors.Timeout, 504, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.BackendError, 500, grpc.StatusCode.INTERNAL),
    (errors.ServerError, 500, grpc.StatusCode.INTERNAL),
]


@pytest.mark.parametrize("cls,http_status,grpc_status", EXPECTED, ids=[c[0].__name__ for c in EXPECTED])
def test_each_transport_maps_core_errors_to_its_codes(cls, http_status, grpc_status):
    err = cls("why")
    assert status_for(HTTP_STATUS, err) == http_status and status_for(GRPC_STATUS, err) == grpc_status
    assert err.body() == {"error": "why", "error_type": cls.error_type}


@pytest.mark.parametrize("cls,http_status,grpc_status", EXPECTED, ids=[c[0].__name__ for c in EXPECTED])
def test_every_refusal_for_now_says_when_to_retry_in_each_transport(cls, http_status, grpc_status):
    """Every 429 / 503 carries Retry-After (whole seconds, at least 1) and retry-after-ms, every RESOURCE_EXHAUSTED /
    UNAVAILABLE grpc-retry-pushback-ms, from the estimate the core's error carries; no other error says to retry."""
    import asyncio

    from server.grpc_service import _abort
    from server.http import error_response

    class Context:  # what _abort gives grpc.aio's context
        async def abort(self, code, details, trailing_metadata):
            self.metadata = dict(trailing_metadata)

    estimate = 0.42 if cls is errors.Overloaded else None
    err = errors.Overloaded("busy", estimate) if cls is errors.Overloaded else cls("why")
    headers = error_response(err).headers
    context = Context()
    asyncio.run(_abort(context, err))  # type: ignore[arg-type]
    for_now = http_status in (429, 503)
    assert for_now == (grpc_status in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE))
    if not for_now:
        assert err.retry_after_s is None and "retry-after" not in headers
        assert set(context.metadata) == {"error-type"}
        return
    seconds = estimate or errors.RETRY_S
    assert headers["retry-after"] == str(max(1, math.ceil(seconds)))
    assert headers["retry-after-ms"] == str(round(seconds * 1e3))
    assert context.metadata == {"error-type": cls.error_type, "grpc-retry-pushback-ms": str(round(seconds * 1e3))}


def test_every_core_error_is_in_the_contract():
    defined = {c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.ServerError)}
    assert defined == {c for c, _, _ in EXPECTED}


# the server in three parts: transports (HTTP and gRPC: they speak the protocols), the core (lifecycle, admission,
# queueing, batching, post-processing) and what both use; server/app.py puts them together
TRANSPORTS = ("server.http", "server.http_middleware", "server.http_protocol", "server.http_docs", "server.http_ui",
              "server.grpc_service", "server.intake", "server.transport", "server.schemas")
CORE = ("server.engine", "server.lifecycle", "server.admission", "server.batcher", "server.models",
        "server.pipelines", "server.timing")
CORE_API = ("server.engine", "server.lifecycle", "server.timing")  # what a transport may call of the core
PROTOCOL_LIBRARIES = ("grpc", "grpc_health", "grpc_reflection", "fastapi", "starlette", "uvicorn", "httptools")


def _server_imports(module: str) -> set[str]:
    from pathlib import Path

    from source_imports import imports

    path = Path(__file__).resolve().parents[2] / (module.replace(".", "/") + ".py")
    found = set()
    for name, imported in imports(path):
        found.add(name)
        if name == "server" and imported:
            found.add(f"server.{imported}")  # `from server import pipelines`
    return found


@pytest.mark.parametrize("module", CORE)
def test_the_core_speaks_neither_http_nor_grpc(module):
    """Nothing of the core imports a transport module or a protocol library: it answers Python calls."""
    found = _server_imports(module)
    assert not {m for m in found if m in TRANSPORTS or m == "server.app"}, found
    assert not {m for m in found if m.split(".")[0] in PROTOCOL_LIBRARIES}, found


@pytest.mark.parametrize("module", TRANSPORTS)
def test_the_transports_keep_no_queue(module):
    """A transport calls the engine and asks the lifecycle; admission, queueing, batching and post-processing are
    the core's alone."""
    found = {m for m in _server_imports(module) if m in CORE}
    assert found <= set(CORE_API), found
