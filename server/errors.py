"""The server's errors, typed once. Each transport maps them once (server/http.py, server/grpc_service.py)
to a status code and the body `{"error": message, "error_type": error_type}`.

Anything else raised while serving a request is a bug or a backend failure: it is logged with its
traceback and answered as `BackendError` (500 / INTERNAL) without the traceback.
"""

from __future__ import annotations

import grpc


class ServerError(Exception):
    """Base class: `error_type` is the stable name clients see; `http_status`/`grpc_status` the codes."""

    error_type = "server_error"
    http_status = 500
    grpc_status = grpc.StatusCode.INTERNAL

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, str]:
        return {"error": self.message, "error_type": self.error_type}


class ValidationError(ServerError):
    """The client's request is wrong: which input and why (422 / INVALID_ARGUMENT)."""

    error_type = "validation_error"
    http_status = 422
    grpc_status = grpc.StatusCode.INVALID_ARGUMENT


class PayloadTooLarge(ValidationError):
    """Body over max_body_bytes, or more inputs than max_inputs_per_request (413 / INVALID_ARGUMENT)."""

    error_type = "payload_too_large"
    http_status = 413


class Unauthorized(ServerError):
    """Missing or wrong API key (401 / UNAUTHENTICATED)."""

    error_type = "unauthorized"
    http_status = 401
    grpc_status = grpc.StatusCode.UNAUTHENTICATED


class Overloaded(ServerError):
    """More than max_concurrent_requests in flight (429 / RESOURCE_EXHAUSTED): retry later."""

    error_type = "overloaded"
    http_status = 429
    grpc_status = grpc.StatusCode.RESOURCE_EXHAUSTED


class NotReady(ServerError):
    """Models still loading or warming up (503 / UNAVAILABLE)."""

    error_type = "not_ready"
    http_status = 503
    grpc_status = grpc.StatusCode.UNAVAILABLE


class ShuttingDown(NotReady):
    """The server is stopping: it refuses new requests, and answers this to requests still running when
    shutdown_grace_s runs out (503 / UNAVAILABLE). Retry on another replica."""

    error_type = "shutting_down"

    @classmethod
    def after_grace(cls, grace_s: float) -> ShuttingDown:
        return cls(f"the server is shutting down and the request did not finish within the shutdown grace period "
                   f"of {grace_s:g} s; retry")


class Timeout(ServerError):
    """The request was not answered within request_timeout_s (504 / DEADLINE_EXCEEDED)."""

    error_type = "timeout"
    http_status = 504
    grpc_status = grpc.StatusCode.DEADLINE_EXCEEDED


class BackendError(ServerError):
    """The model failed to run (500 / INTERNAL). The message never carries a traceback."""

    error_type = "backend_error"
    http_status = 500
    grpc_status = grpc.StatusCode.INTERNAL


class NotFound(ServerError):
    """HTTP only: no such route (404)."""

    error_type = "not_found"
    http_status = 404
    grpc_status = grpc.StatusCode.UNIMPLEMENTED
