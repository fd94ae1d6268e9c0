"""When a request is tried again: the rule, with its caps, for the sync and the async client alike."""

from __future__ import annotations

import random
from dataclasses import dataclass

from electric.client.errors import ClientError


@dataclass(frozen=True)
class Retry:
    """Retry a request the server turned away for now (`ClientError.retryable`: 429 / RESOURCE_EXHAUSTED overloaded,
    503 / UNAVAILABLE not_ready or shutting_down), never one it refused (a wrong input, a wrong key). Wait what the
    server said (`ClientError.retry_after`: HTTP `retry-after-ms` or `Retry-After`, gRPC `grpc-retry-pushback-ms`;
    capped at `max_wait_s`), else `backoff_s` doubled at each try, both with up to 10%
    more at random so that clients turned away together do not come back together; stop after `attempts` tries, or
    when the next wait would end past `total_s` from the first try."""

    attempts: int = 30  # tries of one request at most, the first included
    total_s: float = 120.0  # the longest one request keeps trying
    max_wait_s: float = 30.0  # the longest one wait, whatever Retry-After says
    backoff_s: float = 0.25  # the first wait when the server says none

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        for name in ("total_s", "max_wait_s", "backoff_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be at least 0, got {getattr(self, name)}")

    def wait(self, err: ClientError, tries: int, elapsed: float) -> float | None:
        """Seconds to wait before trying again after `err` on try number `tries`, `elapsed` seconds after the first;
        None: raise it."""
        if not err.retryable or tries >= self.attempts:
            return None
        base = err.retry_after if err.retry_after is not None else self.backoff_s * 2 ** (tries - 1)
        wait = min(base, self.max_wait_s) * random.uniform(1.0, 1.1)
        return None if elapsed + wait > self.total_s else wait

    @staticmethod
    def spent(err: ClientError, tries: int, elapsed: float) -> ClientError:
        """`err` as raised once its retries are spent: the same type, saying how long it tried."""
        if not err.retryable or tries == 1:
            return err
        return type(err)(err.where, f"{err.message} (gave up after {tries} tries in {elapsed:.1f} s)",
                         status=err.status, error_type=err.error_type, retry_after=err.retry_after)
