"""The app factory and the process runner: one event loop running uvicorn (FastAPI) and grpc.aio, both
calling one `Engine`.

    app = create_app(Settings(model="runs/scorer-onnx"))      # tests: their own settings, a tiny model
    run_server(settings)                                      # `electric serve` / `python -m server`

Startup: uvicorn runs the lifespan, which starts the gRPC server and the engine's loading task and
returns at once, so /health answers while the models load; /ready (and gRPC health) turn SERVING after
warm-up.

Shutdown (SIGTERM/SIGINT) finishes what the server had received and refuses the rest. The signal begins the
lifecycle's drain (server/lifecycle.py), in one event loop callback: every HTTP connection notes the bytes it had
received, read or still in its socket (server/http_protocol.py), and gRPC stops taking calls. From then on a request
that had come whole before that moment - an HTTP body within those bytes, a call gRPC had let through - is admitted
and answered with its result; any other gets 503 `shutting_down` (gRPC: UNAVAILABLE), and every HTTP connection
closes after its answer. uvicorn accepts the connections waiting in its listener's queue as it closes it (their
requests came after: 503), and waits for every HTTP request sent on an open connection, read or not, to be
answered, then the lifespan waits for gRPC's calls and the engine's queue. One grace period (`shutdown_grace_s`,
counted from the signal) bounds it all: when it is over, the engine answers the requests still in flight with
`ShuttingDown` (503 / UNAVAILABLE), and the transports get FLUSH_S more to send those answers before they cut
connections - a client that has stopped reading its answer included. The exit status is 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import resource
import signal
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI

from electric import __version__
from electric.checkpoint import require_local_dir, serving_defaults
from electric.evaluation.arpa import ArpaLM
from electric.inference.scoring import model_dir_for_method
from server.engine import Engine, check_ngram_weight
from server.http import ROUTES, add_error_handlers, add_openapi
from server.http_docs import add_docs_routes
from server.http_middleware import HttpRouter
from server.http_protocol import http_protocol, listen_backlog, serve_accepted, stop_listening
from server.http_ui import add_ui_routes
from server.lifecycle import Lifecycle
from server.prometheus import Metrics
from server.settings import Settings
from server.transport import record

log = logging.getLogger("electric.server")
SWITCH_INTERVAL_S = 0.0005
FLUSH_S = 1.0  # after the shutdown grace: time to send the 503 / UNAVAILABLE answers before cutting connections
# on every HTTP response, the app's and the connection's own (uvicorn's 400 and 500, the 431): a browser takes each
# body as its Content-Type says, never as what it looks like
RESPONSE_HEADERS = [("x-content-type-options", "nosniff")]

DESCRIPTION = """Electric pseudo-log-likelihood scores, n-best reranking, ELECTRA replaced-token detection and
fine-tuned classifiers, batched across requests. The same calls are served over gRPC (`electric.v1`).
Errors have the body `{"error": ..., "error_type": ...}`."""


def create_app(settings: Settings, *, loader: Callable[..., Any] | None = None) -> FastAPI:
    """A FastAPI app for `settings`. `loader(path, backend)` replaces `electric.inference.backend.load_backend`
    (tests use it to wrap a backend). Nothing is loaded until the app's lifespan starts."""
    metrics = Metrics()
    lifecycle = Lifecycle(settings.shutdown_grace_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        engine = Engine(settings, metrics, loader, lifecycle)
        app.state.engine = engine
        grpc_server = None
        if settings.grpc_port >= 0:
            from server.grpc_service import GrpcServer  # noqa: PLC0415 - grpc only when enabled

            grpc_server = GrpcServer(engine, settings)
            await grpc_server.start()
            app.state.grpc_port = grpc_server.port
            lifecycle.on_drain(lambda: grpc_server.begin_stop(lifecycle.grace_left() + FLUSH_S))

        async def start() -> None:
            try:
                await engine.start()
            except Exception:  # noqa: BLE001 - the lifecycle holds it; stop the process
                on_fatal = getattr(app.state, "on_fatal", None)
                if on_fatal is not None:
                    on_fatal()
                return
            if grpc_server is not None and lifecycle.ready:
                await grpc_server.set_serving(True)

        startup = asyncio.create_task(start(), name="engine-start")
        try:
            yield
        finally:
            lifecycle.begin_drain()
            if not startup.done():
                startup.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await startup
            if grpc_server is not None:
                await grpc_server.stop(lifecycle.grace_left() + FLUSH_S)
            await engine.close(lifecycle.grace_left() + FLUSH_S)
            log.info("stopped")

    app = FastAPI(title="Electric", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  docs_url=None, redoc_url=None,  # add_docs_routes: the pages without a CDN
                  swagger_ui_oauth2_redirect_url=None)  # no OAuth2: one route fewer that answers without the key
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.lifecycle = lifecycle
    app.state.engine = None
    add_docs_routes(app)
    add_ui_routes(app)
    add_openapi(app, ROUTES, settings)
    add_error_handlers(app)
    app.add_middleware(HttpRouter, settings=settings, metrics=metrics, routes=ROUTES)  # the API; the rest: FastAPI's
    return app


class _Uvicorn(uvicorn.Server):
    """uvicorn.Server whose shutdown signal begins the lifecycle's drain in one callback (what came before it is
    answered, the rest refused), and that answers every HTTP request sent on a connection it had accepted or queued:
    at the drain the connections waiting in the listener's queue are accepted as it closes (stop_listening), and each
    connection closes after its next answer, or when nothing of a next request has come for a moment
    (HttpProtocol.shutdown)."""

    def __init__(self, config: uvicorn.Config, lifecycle: Lifecycle):
        super().__init__(config)
        self.lifecycle = lifecycle
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queued: asyncio.Future | None = None  # serving the connections accepted from the listeners' queues
        lifecycle.on_drain(self._drain_http)

    async def startup(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig, frame) -> None:
        """The signal's handler (it may interrupt any code of the event loop's thread): the drain begins as the
        loop's next callback, between two of the others."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.lifecycle.begin_drain)
        super().handle_exit(sig, frame)

    def _drain_http(self) -> None:
        """HTTP's part of the drain's first moment: the listeners close (the connections already queued are
        accepted, their requests refused), and every open connection notes what it has received (read or not) and
        closes after its next answer."""
        queued = stop_listening(self.servers)
        if queued:
            log.info("accepted %d connections waiting in the listener's queue", len(queued))
        # uvicorn types http_protocol_class as an asyncio.Protocol; it is config.http, an HttpToolsProtocol subclass
        make_protocol = functools.partial(self.config.http_protocol_class,  # type: ignore[call-arg]
                                          config=self.config, server_state=self.server_state,
                                          app_state=self.lifespan.state)
        self._queued = asyncio.ensure_future(serve_accepted(queued, make_protocol))
        for connection in list(self.server_state.connections):
            connection.shutdown()

    async def shutdown(self, sockets=None) -> None:
        self.lifecycle.begin_drain()  # already begun, unless the server stops for another reason than a signal
        if self._queued is not None:
            await self._queued
        await super().shutdown(sockets)  # closing the closed listeners again does nothing

    @contextlib.contextmanager
    def capture_signals(self):
        """As uvicorn's, without re-raising the signal afterwards: a drained shutdown exits with status 0."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def build_server(settings: Settings, *, loader: Callable[..., Any] | None = None) -> tuple[_Uvicorn, FastAPI]:
    app = create_app(settings, loader=loader)
    lifecycle: Lifecycle = app.state.lifecycle

    def refused(client: str, status: int, error_type: str, seconds: float) -> None:  # answered before the app saw it
        record(app.state.metrics, settings, "http", "unmatched", status, error_type, seconds, client=client)

    backlog = listen_backlog(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    protocol = http_protocol(settings, refused, lifecycle, backlog)
    config = uvicorn.Config(app, host=settings.host, port=settings.http_port, log_config=None, access_log=False,
                            lifespan="on", server_header=False, log_level=settings.log_level, http=protocol,
                            headers=RESPONSE_HEADERS, backlog=backlog,
                            timeout_keep_alive=settings.keepalive_timeout_s,  # type: ignore[arg-type]  # as below
                            # uvicorn hints int seconds, but passes it to asyncio.wait_for: a float is fine
                            timeout_graceful_shutdown=settings.shutdown_grace_s + FLUSH_S)  # type: ignore[arg-type]
    server = _Uvicorn(config, lifecycle)

    def on_fatal() -> None:
        server.should_exit = True

    app.state.on_fatal = on_fatal
    return server, app


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the process's event loop: uvloop's (its loop, socket and timer code is libuv and C, so each
    request costs the loop less Python) for "uvloop", and for "auto" when it is installed; asyncio's otherwise.
    grpc.aio and uvicorn both run on either. ValueError when "uvloop" is asked for and not installed."""
    if choice not in ("auto", "uvloop", "asyncio"):
        raise ValueError(f"event loop {choice!r}: expected auto, uvloop or asyncio")
    if choice != "asyncio":
        try:
            import uvloop  # noqa: PLC0415 - optional
        except ImportError:
            if choice == "uvloop":
                raise ValueError("event loop uvloop: uvloop is not installed (pip install uvloop; Linux and macOS "
                                 "only), or use --event-loop asyncio") from None
        else:
            return uvloop.new_event_loop
    return asyncio.new_event_loop


def check_start(settings: Settings) -> None:
    """What would stop `serve` as soon as it starts, found before anything starts, so that `electric serve` says it
    in one line: a --model or --classifier directory that is not there (CheckpointError), an n-gram LM the model
    names that does not parse or an n-gram weight without one (ValueError), a port another process holds (OSError). What only loading finds (a corrupt model, a model of the wrong kind) still fails the start
    in the log, as before."""
    if settings.model is not None:
        scorer = model_dir_for_method(settings.model, "electric")
        ngram_file = serving_defaults(scorer).ngram
        # an n-gram LM that does not parse (NgramError), or an n-gram weight without one
        check_ngram_weight(settings.rerank_defaults(), None if ngram_file is None else ArpaLM.read(ngram_file))
    for name, path in settings.classifiers.items():
        require_local_dir(path, f"--classifier {name}")
    for flag, port in (("--http-port", settings.http_port), ("--grpc-port", settings.grpc_port)):
        if port > 0:  # 0 picks a free port, -1 (gRPC) is off
            _check_port_free(settings.host, port, flag)


def _check_port_free(host: str, port: int, flag: str) -> None:
    """OSError naming `flag` when `host:port` cannot be listened on, tried as uvicorn binds (SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host.strip("[]"), port))
            sock.listen()
        except OSError as e:
            raise OSError(f"{flag} {port}: cannot listen on {host}:{port}: {e.strerror or e}") from None


def run_server(settings: Settings, factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> int:
    """`serve` on a loop from `factory` (default: the one `settings.event_loop` asks for); the exit status."""
    factory = factory or event_loop_factory(settings.event_loop)
    log.info("event loop: %s", factory.__module__.split(".")[0])
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(serve(settings))
    loop = factory()  # Python 3.10: asyncio.run has no loop factory
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(serve(settings))
    finally:
        asyncio.set_event_loop(None)
        loop.close()


async def serve(settings: Settings, *, loader: Callable[..., Any] | None = None) -> int:
    """Run until SIGTERM/SIGINT; 0 on a clean stop, 1 if the models could not be loaded."""
    # The event loop and the inference thread hand the GIL back and forth on every batch; Python's
    # default 5 ms switch interval would add up to that much latency to each handoff.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    server, app = build_server(settings, loader=loader)
    await server.serve()
    return 1 if app.state.engine is None or app.state.lifecycle.error is not None else 0


def http_port(server: uvicorn.Server) -> int:
    """The bound HTTP port (useful with http_port=0)."""
    for s in server.servers:
        for sock in s.sockets:
            return sock.getsockname()[1]
    raise RuntimeError("the HTTP server is not listening")


class BackgroundServer:
    """The whole server in a thread with its own event loop (tests, notebooks). Ports 0 pick free ones.

        with BackgroundServer(Settings(model=d, http_port=0, grpc_port=0)) as s:
            httpx.post(f"{s.url}/v1/score", json={"texts": ["hello"]})
    """

    def __init__(self, settings: Settings, *, loader: Callable[..., Any] | None = None, wait_ready: bool = True,
                 timeout: float = 120.0):
        self.settings, self.loader, self.wait_ready, self.timeout = settings, loader, wait_ready, timeout
        self.server: _Uvicorn | None = None
        self.app: FastAPI | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _run(self) -> None:
        self.loop = event_loop_factory(self.settings.event_loop)()
        assert self.server is not None, "start() sets it before it starts this thread"
        try:
            self.loop.run_until_complete(self.server.serve())
        except BaseException as e:  # noqa: BLE001 - reported by start()
            self.error = e
        finally:
            self.loop.close()

    def start(self) -> BackgroundServer:
        import time

        self.server, self.app = build_server(self.settings, loader=self.loader)
        self._thread = threading.Thread(target=self._run, name="electric-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.timeout
        while not (self.server.started and (self.app.state.lifecycle.ready or not self.wait_ready)):
            failed = self.app.state.lifecycle.error
            if failed is not None:
                raise RuntimeError(f"the models did not load: {failed}")
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"the server did not start: {self.error or 'it stopped'}")
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start in time")
            time.sleep(0.02)
        return self

    @property
    def engine(self) -> Engine:
        assert self.app is not None, "start() sets it"
        return self.app.state.engine

    @property
    def port(self) -> int:
        assert self.server is not None, "start() sets it"
        return http_port(self.server)

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.port}"

    @property
    def grpc_target(self) -> str:
        assert self.app is not None, "start() sets it"
        return f"{self.settings.host}:{self.app.state.grpc_port}"

    def call(self, fn: Callable[[], Any]) -> None:
        """Run `fn` on the server's event loop."""
        assert self.loop is not None, "the server's thread sets it as it starts"
        self.loop.call_soon_threadsafe(fn)

    def stop(self, timeout: float = 60.0) -> None:
        """Like SIGTERM: answer what was received, refuse the rest, stop."""
        if self.server is not None and self._thread is not None and self._thread.is_alive():
            assert self.loop is not None, "the server's thread sets it as it starts"
            self.loop.call_soon_threadsafe(self.server.handle_exit, None, None)
            self._thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
