"""`Client` and `AsyncClient`: the calls of `electric serve`, with the server's limits and backpressure handled.

Each call fetches the server's limits once (`info()`, kept for the client's life), cuts its inputs into requests
that fit them (electric.client.plans), sends at most `concurrency` at once, tries each again while the server
turns it away for now (electric.client.retry.Retry) and returns the results in input order. The first error ends
the call: its requests not yet sent are not sent, and the error names the call's input when it is about one.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

import electric.client.plans as plans
from electric.client.errors import ApiMismatch, ClientError, RejectedInput, renumbered
from electric.client.info import ServerInfo
from electric.client.retry import Retry
from electric.client.transports import (
    AsyncGrpcTransport,
    AsyncHttpTransport,
    AsyncTransport,
    GrpcTransport,
    HttpTransport,
    Transport,
    parse_url,
)
from electric.results import Classification, Detection, RerankedList, TextScore

API_KEY_ENV = "ELECTRIC_API_KEY"  # the key when none is given (the server reads the same variable)
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_CONCURRENCY = 8


class _Base:
    """What both clients hold: the address, the key, the limits once known, and the rules."""

    def __init__(self, url: str, api_key: str | None, transport: str | None, timeout: float, concurrency: int,
                 retry: Retry):
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if not timeout > 0:
            raise ValueError(f"timeout must be more than 0 seconds, got {timeout}")
        kind, self.url = parse_url(url, transport)
        self.transport, self.timeout, self.concurrency, self.retry = kind, timeout, concurrency, retry
        self._key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        self._info: ServerInfo | None = None

    def _server_info(self, answer: dict[str, Any]) -> ServerInfo:
        try:
            info = ServerInfo.from_dict(answer)
        except (KeyError, TypeError, ValueError) as e:
            raise ApiMismatch(self.url, f"its /info is not an electric v1 server's ({type(e).__name__}: {e})") from None
        self._info = info
        return info

    def _requests(self, plan: plans.Plan, info: ServerInfo) -> list[plans.Request]:
        return plan.requests(self.url, info.limits, self.concurrency)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r}, concurrency={self.concurrency})"


def _one(request: plans.Request, err: ClientError) -> ClientError:
    """An error of one request as the call's: a refused input numbered as the call's."""
    return renumbered(err, request.offset) if isinstance(err, RejectedInput) else err


class Client(_Base):
    """A server's calls, blocking (thread-safe: one client may serve many threads).

        with Client("http://127.0.0.1:8000") as c:            # or "grpc://127.0.0.1:50051"
            scores = c.score(["show me flights to denver", "show me fights to denver"])

    `api_key`: sent as `Authorization: Bearer KEY`; default $ELECTRIC_API_KEY. `transport`: "http" or "grpc" when
    the URL has no scheme. `timeout`: seconds for one request. `concurrency`: requests in flight at once.
    """

    def __init__(self, url: str, api_key: str | None = None, *, transport: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, concurrency: int = DEFAULT_CONCURRENCY, retry: Retry = Retry()):
        super().__init__(url, api_key, transport, timeout, concurrency, retry)
        self._transport: Transport = (HttpTransport if self.transport == "http" else GrpcTransport)(
            self.url, self._key, timeout, concurrency)
        self._pool: ThreadPoolExecutor | None = None  # the threads that send, `concurrency` at most, made at need
        self._pool_lock = threading.Lock()

    def info(self) -> ServerInfo:
        """The server's models, limits and default rerank weights (GET /info, Info/GetInfo)."""
        return self._server_info(self._send(plans.Request("info", None, 0)))

    def ready(self) -> bool:
        """Whether the server answers and its models are loaded and warm; False while it loads, shuts down, or
        cannot be reached."""
        return self._transport.ready()

    def score(self, texts: Sequence[str], method: str | None = None, *, per_token: bool = False,
              truncate: bool = False) -> list[TextScore]:
        """The score of each text: the served method's (`info().method`: electric or cloze), or "electra" from a
        server that detects (sum_t log(1 - p_t)). `per_token` adds each token's score; `truncate` cuts texts over
        the token limit instead of refusing them."""
        return self._execute(lambda info: plans.score(texts, method, per_token, truncate, info))

    def detect(self, texts: Sequence[str], *, per_token: bool = True, truncate: bool = False) -> list[Detection]:
        """Each token's and word's replaced probability, and the text's sum_t log(1 - p_t)."""
        return self._execute(lambda info: plans.detect(texts, per_token, truncate))

    def rerank(self, lists: Sequence[Any], weights: Any = None, *, truncate: bool = False) -> list[RerankedList]:
        """n-best lists reordered by prior + lm * LM + length * words + piece * pieces. A list is its hypotheses
        (best first), a mapping {"hypotheses", "scores", "id"}, or an `electric.evaluation.nbest.NBestList`;
        `weights` (a mapping or a `Weights`) over the server's defaults (`info().rerank_defaults`)."""
        return self._execute(lambda info: plans.rerank(lists, weights, truncate))

    def classify(self, inputs: Sequence[str] | Sequence[tuple[str, str]], model: str | None = None, *,
                 truncate: bool = False) -> list[Classification]:
        """Labels of texts, or of pairs of texts, from the classifier `model` (optional on a server with one)."""
        return self._execute(lambda info: plans.classify(inputs, model, truncate))

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- how a call runs -----------------------------------------------------------------------------------

    def _execute(self, make: Callable[[ServerInfo], plans.Plan]) -> list[Any]:
        info = self._info or self.info()
        plan = make(info)
        if not plan.items:
            return []
        requests = self._requests(plan, info)
        if len(requests) == 1:
            return plan.results([self._send(requests[0])])
        # the client's threads, kept between calls (making them for each call cost it more CPU than its requests);
        # the calls of all threads share them: `concurrency` requests in flight in all
        pool = self._threads()
        futures = [pool.submit(self._send, r) for r in requests]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f for f in futures if f in done and f.exception() is not None), None)
            if failed is not None:
                raise _exception(failed)
            return plan.results([f.result() for f in futures])
        finally:
            for f in futures:  # an error, or Ctrl-C: what is not sent yet is not sent (what is in flight finishes)
                f.cancel()

    def _threads(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="electric-client")
            return self._pool

    def _send(self, request: plans.Request) -> dict[str, Any]:
        """One request, tried again while the server turns it away for now."""
        t0, tries = time.monotonic(), 0
        while True:
            tries += 1
            try:
                return self._transport.call(request.call, request.payload)
            except ClientError as e:
                elapsed = time.monotonic() - t0
                pause = self.retry.wait(e, tries, elapsed)
                if pause is None:
                    raise _one(request, self.retry.spent(e, tries, elapsed)) from None
            time.sleep(pause)


def _exception(future: Future) -> BaseException:
    e = future.exception()
    assert e is not None, "a failed future"
    return e


class AsyncClient(_Base):
    """The same calls as `Client`, awaited:

        async with AsyncClient("http://127.0.0.1:8000") as c:
            scores = await c.score(["show me flights to denver"])
    """

    def __init__(self, url: str, api_key: str | None = None, *, transport: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, concurrency: int = DEFAULT_CONCURRENCY, retry: Retry = Retry()):
        super().__init__(url, api_key, transport, timeout, concurrency, retry)
        self._transport: AsyncTransport = (AsyncHttpTransport if self.transport == "http" else AsyncGrpcTransport)(
            self.url, self._key, timeout, concurrency)

    async def info(self) -> ServerInfo:
        return self._server_info(await self._send(plans.Request("info", None, 0)))

    async def ready(self) -> bool:
        return await self._transport.ready()

    async def score(self, texts: Sequence[str], method: str | None = None, *, per_token: bool = False,
                    truncate: bool = False) -> list[TextScore]:
        return await self._execute(lambda info: plans.score(texts, method, per_token, truncate, info))

    async def detect(self, texts: Sequence[str], *, per_token: bool = True, truncate: bool = False) -> list[Detection]:
        return await self._execute(lambda info: plans.detect(texts, per_token, truncate))

    async def rerank(self, lists: Sequence[Any], weights: Any = None, *, truncate: bool = False) -> list[RerankedList]:
        return await self._execute(lambda info: plans.rerank(lists, weights, truncate))

    async def classify(self, inputs: Sequence[str] | Sequence[tuple[str, str]], model: str | None = None, *,
                       truncate: bool = False) -> list[Classification]:
        return await self._execute(lambda info: plans.classify(inputs, model, truncate))

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _execute(self, make: Callable[[ServerInfo], plans.Plan]) -> list[Any]:
        info = self._info or await self.info()
        plan = make(info)
        if not plan.items:
            return []
        requests = self._requests(plan, info)
        slots = asyncio.Semaphore(self.concurrency)

        async def one(request: plans.Request) -> dict[str, Any]:
            async with slots:
                return await self._send(request)

        tasks = [asyncio.ensure_future(one(r)) for r in requests]
        try:
            answers = await asyncio.gather(*tasks)
        except BaseException:  # an error, or the caller's cancellation: what is not sent yet is not sent
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return plan.results(answers)

    async def _send(self, request: plans.Request) -> dict[str, Any]:
        t0, tries = time.monotonic(), 0
        while True:
            tries += 1
            try:
                return await self._transport.call(request.call, request.payload)
            except ClientError as e:
                elapsed = time.monotonic() - t0
                pause = self.retry.wait(e, tries, elapsed)
                if pause is None:
                    raise _one(request, self.retry.spent(e, tries, elapsed)) from None
            await asyncio.sleep(pause)
