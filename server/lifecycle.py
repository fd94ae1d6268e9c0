"""The server's lifecycle: one state that the engine and both transports ask, none keeping a copy of it.

    loading ──▶ ready ──▶ draining ──▶ stopped
       └──▶ failed ──────────┘

`loaded()` and `failed_with(e)` end the loading; `begin_drain()` is the shutdown's first moment (SIGTERM or SIGINT:
server/app.py calls it, once, on the event loop), and runs every callback registered with `on_drain`, in the order
they were registered: the HTTP listeners close and each connection notes what it has received, gRPC stops taking
calls. The drain admits a request by one rule (`admit`): a request its transport received before the drain began,
while the models were ready, is admitted and answered with its result; any other is refused with `ShuttingDown`.
One grace period (`grace_s`, counted from the drain) bounds it: when it is over, `grace_over` turns true and the
`on_grace_over` callbacks run (the engine answers what is still in flight with `ShuttingDown`). `stopped()` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable

from server.errors import NotReady, ShuttingDown

log = logging.getLogger("electric.server")


class State(enum.Enum):
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"  # loading did not finish: `error` says why
    DRAINING = "draining"
    STOPPED = "stopped"


class Lifecycle:
    def __init__(self, grace_s: float):
        self.grace_s = grace_s
        self.state = State.LOADING
        self.error: BaseException | None = None  # why the loading failed
        self.grace_over = False
        self._drain_at: float | None = None  # time.monotonic() of begin_drain
        self._served = False  # the models were ready when the drain began: what was received before is answered
        self._on_drain: list[Callable[[], None]] = []
        self._on_grace_over: list[Callable[[], None]] = []

    @property
    def ready(self) -> bool:
        return self.state is State.READY

    @property
    def draining(self) -> bool:
        """The drain has begun (it may be over)."""
        return self._drain_at is not None

    def status(self) -> str:
        """What /ready says while not ready: loading, failed or shutting_down."""
        return "shutting_down" if self.draining else self.state.value

    def on_drain(self, callback: Callable[[], None]) -> None:
        """Call `callback` at the drain's first moment (at once if it has begun)."""
        self._on_drain.append(callback)
        if self.draining:
            callback()

    def on_grace_over(self, callback: Callable[[], None]) -> None:
        self._on_grace_over.append(callback)

    # ---- transitions ----------------------------------------------------------------------------------------

    def loaded(self) -> None:
        """The models are loaded and warmed up: ready, unless the drain began meanwhile."""
        if self.state is State.LOADING:
            self.state = State.READY
            log.info("ready")

    def failed_with(self, error: BaseException) -> None:
        self.error = error
        if self.state is State.LOADING:
            self.state = State.FAILED

    def begin_drain(self) -> None:
        """The shutdown's first moment: from now on only what was received before is admitted. Once; on the event
        loop, which times the grace (without one running, nothing ends the grace)."""
        if self.draining:
            return
        self._drain_at = time.monotonic()
        self._served = self.state is State.READY
        self.state = State.DRAINING
        for callback in self._on_drain:
            callback()
        with contextlib.suppress(RuntimeError):  # no event loop in this thread: a test's engine, never started
            asyncio.get_running_loop().call_later(self.grace_s, self._end_grace)

    def _end_grace(self) -> None:
        self.grace_over = True
        for callback in self._on_grace_over:
            callback()

    def stopped(self) -> None:
        self.state = State.STOPPED

    # ---- asked ------------------------------------------------------------------------------------------------

    def grace_left(self) -> float:
        """Seconds of the grace left (all of it before the drain)."""
        elapsed = 0.0 if self._drain_at is None else time.monotonic() - self._drain_at
        return max(0.0, self.grace_s - elapsed)

    def admit(self, before_drain: bool) -> None:
        """Whether a request may come in, for both transports: while ready, yes; while loading, NotReady; once
        draining, ShuttingDown unless its transport had received it before the drain began (`before_drain`: HTTP,
        its whole body had come; gRPC, its server let the call through, as it does none from the drain on) while the
        models were ready, and the grace is not over."""
        if self.state is State.READY:
            return
        if self.draining:
            if not (before_drain and self._served):
                raise ShuttingDown("the server is shutting down; retry")
            if self.grace_over:
                raise ShuttingDown.after_grace(self.grace_s)
            return
        raise NotReady("the models are still loading" if self.error is None else
                       f"the models failed to load: {self.error}")
