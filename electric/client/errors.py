"""The client's errors: one line each, naming where it was sent and what the server said.

A server's refusal arrives as `{error, error_type}` with an HTTP status, or as a gRPC status with the same
`error-type` in its trailing metadata (docs/server.md, "Errors"). It becomes one of the types below; `retryable`
says whether the same request may succeed later (429 / RESOURCE_EXHAUSTED `overloaded`, 503 / UNAVAILABLE
`not_ready` or `shutting_down`), `retry_after` what the server asked to wait, in seconds (HTTP `retry-after-ms`
or `Retry-After`, gRPC `grpc-retry-pushback-ms`).
"""

from __future__ import annotations

import math
import re
from typing import Any

# how a server names an input in its refusals: `input 3 has ...`, `texts[3]: ...`, `lists[3].hypotheses[1] ...`
_INPUT_NAME = re.compile(r"\b(input |texts\[|pairs\[|lists\[)(\d+)")


class ClientError(Exception):
    """A call that did not get its answer. `where`: the URL (or gRPC target and method) it went to; `status`: the
    HTTP status or gRPC status name, when the server answered; `error_type`: the server's name for it."""

    retryable = False

    def __init__(self, where: str, message: str, *, status: int | str | None = None, error_type: str | None = None,
                 retry_after: float | None = None):
        what = " ".join(str(x) for x in (status, error_type) if x is not None)
        super().__init__(f"{where}: {what + ': ' if what else ''}{_one_line(message)}")
        self.where, self.message, self.status, self.error_type = where, message, status, error_type
        self.retry_after = retry_after


class Unreachable(ClientError):
    """Nothing answered: the connection was refused or dropped, or no answer came within the timeout."""


class ApiMismatch(ClientError):
    """Something answered, but not with this client's API (electric.v1): another program, or another version."""


class WrongKey(ClientError):
    """The server wants an API key, and this one is missing or wrong (401 / UNAUTHENTICATED). Never retried."""


class RejectedInput(ClientError, ValueError):
    """The server refused the input (400, 413, 422 / INVALID_ARGUMENT), or the client found it cannot fit a request.
    `index`: the position in the call's own inputs (texts, pairs or n-best lists) of the input it names, if any.
    Never retried."""

    def __init__(self, where: str, message: str, *, index: int | None = None, **kwargs: Any):
        super().__init__(where, message, **kwargs)
        self.index = index

    @property
    def reason(self) -> str:
        """What is wrong with the input, without its name: `has 1200 characters, more than the limit of 1000 ...`."""
        found = _INPUT_NAME.search(self.message)
        if found is None:
            return self.message
        return self.message[found.end():].lstrip("]").lstrip(":. ").strip() or self.message


class ServerBusy(ClientError):
    """The server is overloaded (429 / RESOURCE_EXHAUSTED): retried, and raised once the retries are spent."""

    retryable = True


class ServerUnavailable(ClientError):
    """The server is loading, or shutting down (503 / UNAVAILABLE): retried, and raised once the retries are spent."""

    retryable = True


def _one_line(text: str) -> str:
    return " ".join(text.split())


# the server's error_type -> the error; anything else by its status (`from_http`, `from_grpc`)
ERROR_TYPES: dict[str, type[ClientError]] = {
    "validation_error": RejectedInput, "payload_too_large": RejectedInput, "http_error": RejectedInput,
    "unauthorized": WrongKey, "overloaded": ServerBusy, "not_ready": ServerUnavailable,
    "shutting_down": ServerUnavailable, "not_found": ApiMismatch, "method_not_allowed": ApiMismatch,
}
HTTP_STATUS: dict[int, type[ClientError]] = {400: RejectedInput, 401: WrongKey, 404: ApiMismatch, 405: ApiMismatch,
                                             413: RejectedInput, 422: RejectedInput, 429: ServerBusy,
                                             503: ServerUnavailable}
GRPC_STATUS: dict[str, type[ClientError]] = {"INVALID_ARGUMENT": RejectedInput, "UNAUTHENTICATED": WrongKey,
                                             "UNIMPLEMENTED": ApiMismatch}


def server_error(where: str, status: int | str, error_type: str | None, message: str,
                 retry_after: float | None = None) -> ClientError:
    """The error for a server's refusal: by its `error_type` when it gave one, else by its `status` (HTTP, or a gRPC
    status name); a refusal naming an input gets its index. A gRPC RESOURCE_EXHAUSTED or UNAVAILABLE without an
    `error-type` is not the server's own (a message over grpc's size limit; no connection) and is not retried."""
    cls = ERROR_TYPES.get(error_type or "") or (HTTP_STATUS.get(status) if isinstance(status, int) else
                                                GRPC_STATUS.get(status)) or ClientError
    if status == "UNAVAILABLE" and error_type is None:
        cls = Unreachable
    if cls is RejectedInput:
        found = _INPUT_NAME.search(message)
        return RejectedInput(where, message, index=None if found is None else int(found.group(2)), status=status,
                             error_type=error_type)
    return cls(where, message, status=status, error_type=error_type, retry_after=retry_after)


def renumbered(err: RejectedInput, offset: int) -> RejectedInput:
    """`err` from a request that held the call's inputs from `offset` on, with the inputs it names numbered as the
    call's (`input 3` of the third request of 256 inputs is `input 515`)."""
    if not offset or err.index is None:
        return err
    message = _INPUT_NAME.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + offset}", err.message)
    return RejectedInput(err.where, message, index=err.index + offset, status=err.status, error_type=err.error_type)


def retry_after(seconds: str | None = None, ms: str | None = None) -> float | None:
    """Seconds to wait from what a server said: `ms`, milliseconds (HTTP `retry-after-ms`, gRPC
    `grpc-retry-pushback-ms`), first, else `seconds` (HTTP `Retry-After` as a number of seconds; an HTTP date is not
    used here); None when neither is a number at least 0."""
    for value, scale in ((ms, 1e-3), (seconds, 1.0)):
        try:
            wait = float(value) * scale if value is not None else math.nan
        except ValueError:
            continue
        if wait >= 0 and math.isfinite(wait):
            return wait
    return None
