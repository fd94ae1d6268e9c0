"""The server's errors, typed once, without status codes: the core (engine, batcher) raises them and knows no
transport. Each transport owns one table from these types to its codes (`HTTP_STATUS` in server/http.py,
`GRPC_STATUS` in server/grpc_service.py) and answers `{"error": message, "error_type": error_type}`. A refusal
for now (`Overloaded`, `NotReady`, `ShuttingDown`) carries `retry_after_s`, the core's estimate of when to try again,
in seconds; each transport writes it its own way (HTTP `Retry-After`, gRPC `grpc-retry-pushback-ms`).

Anything else raised while serving a request is a bug or a backend failure: it is logged with its
traceback and answered as `BackendError` without the traceback.
"""

from __future__ import annotations


class ServerError(Exception):
    """Base class: `error_type` is the stable name clients see."""

    error_type = "server_error"
    retry_after_s: float | None = None  # seconds after which the same request may succeed; None: it will not

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, str]:
        return {"error": self.message, "error_type": self.error_type}


class ValidationError(ServerError):
    """The client's request is wrong: which input and why."""

    error_type = "validation_error"


class UnreadableBody(ValidationError):
    """A body that cannot be read as text of its format: JSON that is not UTF-8. `http_error` is the name HTTP
    clients have always seen for it (a 400). JSON text that cannot be made into values (nested too deeply, an
    integer too long to convert) is a plain ValidationError (422) naming the field."""

    error_type = "http_error"


class PayloadTooLarge(ValidationError):
    """Body over max_body_bytes, or more inputs than max_inputs_per_request."""

    error_type = "payload_too_large"


def check_count(n: int, what: str, limit: int) -> None:
    """PayloadTooLarge when `n` inputs (of `what`: texts, hypotheses, ...) are more than `limit`
    (max_inputs_per_request): the engine's rule, which the transports apply before they look at any element."""
    if n > limit:
        raise PayloadTooLarge(f"{n} {what} in one request, the limit is {limit}")


class Unauthorized(ServerError):
    """Missing or wrong API key."""

    error_type = "unauthorized"


RETRY_S = 1.0  # when to try again where the core has no estimate: loading, draining, nothing admitted to time


class Overloaded(ServerError):
    """More than max_concurrent_requests in flight, or more work queued than the request could wait for
    (server/admission.py): retry after `retry_after_s`, admission's estimate of when the work ahead will have gone
    (RETRY_S without one)."""

    error_type = "overloaded"

    def __init__(self, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.retry_after_s = RETRY_S if retry_after_s is None else retry_after_s


class NotReady(ServerError):
    """Models still loading or warming up: retry after RETRY_S."""

    error_type = "not_ready"
    retry_after_s = RETRY_S


class ShuttingDown(NotReady):
    """The server is stopping: it refuses the requests received after the signal, and answers this to requests
    still running when shutdown_grace_s runs out. Retry on another replica."""

    error_type = "shutting_down"

    @classmethod
    def after_grace(cls, grace_s: float) -> ShuttingDown:
        return cls(f"the server is shutting down and the request did not finish within the shutdown grace period "
                   f"of {grace_s:g} s; retry")


class Timeout(ServerError):
    """The request was not answered within request_timeout_s."""

    error_type = "timeout"


class BackendError(ServerError):
    """The model failed to run. The message never carries a traceback."""

    error_type = "backend_error"
