"""What the HTTP and gRPC transports share after a request is checked (server/intake.py checks it): the status code
of a core error from a transport's table, the timing metadata sent back with an answer, and counting and logging
each answered request. Transport-neutral: no HTTP or gRPC library is imported here."""

from __future__ import annotations

import json
import logging
import time
from typing import TypeVar

from server.errors import ServerError
from server.prometheus import Metrics
from server.settings import Settings
from server.timing import Timing

access_log = logging.getLogger("electric.access")

Code = TypeVar("Code")


def status_for(table: dict[type[ServerError], Code], err: ServerError) -> Code:
    """`err`'s code in a transport's table: the entry of its class or of the nearest base class listed."""
    return next(table[c] for c in type(err).__mro__ if c in table)


def timing_metadata(t: Timing, *, sizes: bool = False) -> tuple[tuple[str, str], ...]:
    """Where the time went, in ms (`x-tokenization-time`, `x-queue-time`, `x-inference-time`) and `x-batches`;
    with `sizes` also `x-inputs` and `x-tokens` (HTTP headers carry them, gRPC metadata does not)."""
    meta = (("x-tokenization-time", f"{t.tokenize * 1e3:.3f}"), ("x-queue-time", f"{t.queue * 1e3:.3f}"),
            ("x-inference-time", f"{t.inference * 1e3:.3f}"), ("x-batches", str(t.batches)))
    return meta + (("x-inputs", str(t.inputs)), ("x-tokens", str(t.tokens))) if sizes else meta


def record(metrics: Metrics, settings: Settings, transport: str, route: str, status: int | str,
           error_type: str | None, seconds: float, timing: Timing | None = None, client: str = "",
           log: bool = True) -> None:
    """Count one answered request (failures included) and, with the access log on and `log`, log it."""
    metrics.observe_request(route, transport, status, error_type, seconds)
    if log and settings.access_log:
        log_request(transport, route, status, error_type, seconds, timing, client)


def log_request(transport: str, route: str, status: int | str, error_type: str | None, seconds: float,
                timing: Timing | None, client: str = "") -> None:
    """One structured line per request (logger `electric.access`, JSON)."""
    if not access_log.isEnabledFor(logging.INFO):
        return
    rec = {"ts": round(time.time(), 3), "transport": transport, "route": route, "status": status,
           "total_ms": round(seconds * 1e3, 3), "client": client}
    if error_type:
        rec["error_type"] = error_type
    if timing is not None:
        rec.update(inputs=timing.inputs, tokens=timing.tokens, batches=timing.batches,
                   tokenize_ms=round(timing.tokenize * 1e3, 3), queue_ms=round(timing.queue * 1e3, 3),
                   inference_ms=round(timing.inference * 1e3, 3))
    # as access_log.info(line), without looking up the caller's file and line (no format uses them)
    access_log.handle(access_log.makeRecord(access_log.name, logging.INFO, "", 0, json.dumps(rec, separators=(",", ":")),
                                            (), None))
