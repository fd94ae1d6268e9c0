"""The batcher: each model's queue (its slot), the tokenise and batch loops, and the forward pass in a worker thread.

    Engine ──▶ Batcher.submit ──▶ slot.arrivals ──▶ tokenise loop ──▶ slot.pending ──▶ batch loop ──▶ worker thread
           ──▶ backend.run

- Batching: every input of every request goes into its model's queue; when the worker is free, the next batch
  is taken by the rule `Batcher.take_batch` states (round robin over requests, within `max_batch_tokens` padded
  tokens and `max_batch_size` inputs). Inputs that arrive while a batch runs are batched together next (continuous
  batching); `max_wait_ms` > 0 also lets an idle worker wait that long for company.
- Cancellation: when a client goes away (HTTP disconnect, gRPC cancel, timeout) its queued inputs are
  dropped before they reach the model.
- Tokenisation, one path (`_tokenize_loop`): the inputs of all the requests that arrived since the last round are
  tokenised together, with one call of the Rust batch encoder (electric.inference.encoding.encode_requests), in a
  tokeniser thread while the loop goes on - on the event loop only when the round is small and the model idle (a
  thread hop costs more latency than that; under load the loop's time matters more), and for a small request that
  arrives while a big round is in the thread (so it never waits behind one). An input over the token limit fails
  its request (naming the first such input) before anything reaches the model.
- Admission: each slot's `server.admission.Admission` is told of every request as it is admitted, tokenised, run
  and leaves, by those events alone.
- Inference (padding, forward pass and per-input post-processing: server.pipelines) runs in one worker
  thread, off the event loop.

The engine (server/engine.py) validates a request, then hands its inputs to `Batcher.submit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from electric.batching import length_bucket, pad_rows, pad_values
from electric.inference.encoding import Encoded, InputTooLongError, PairEncoded, encode_requests
from server.admission import Admission, cost, input_chars
from server.errors import BackendError, ServerError, Timeout, ValidationError
from server.models import ServedModel
from server.prometheus import Metrics
from server.settings import Settings
from server.timing import Timing

log = logging.getLogger("electric.server")

INLINE_TOKENIZE_CHARS = 256  # tokenisation rounds with more characters run in the tokeniser thread


class _Request:
    """One call's inputs (texts or pairs) on their way through tokenisation and batches. `post(encoded, row)`
    turns one input's row of logits into its result; `names(i)` names input i in error messages."""

    __slots__ = ("inputs", "truncate", "names", "post", "future", "results", "remaining", "timing", "t_enqueued",
                 "last_batch", "started", "warmup", "chars")

    def __init__(self, inputs: list, truncate: bool, names: Callable[[int], str],
                 post: Callable[[Any, np.ndarray], Any], loop: asyncio.AbstractEventLoop, timing: Timing):
        self.inputs, self.truncate, self.names, self.post = inputs, truncate, names, post
        self.future: asyncio.Future = loop.create_future()
        self.results: list[Any] = [None] * len(inputs)
        self.remaining = len(inputs)
        self.timing = timing
        self.t_enqueued = time.perf_counter()
        self.last_batch = -1
        self.started = False
        self.warmup = False  # the start-up warm-up's: kept out of the request metrics
        self.chars = sum(map(input_chars, inputs))


class _Item:
    """One tokenised input (`Encoded` or `PairEncoded`) waiting for a batch."""

    __slots__ = ("request", "index", "enc", "length", "bucket")

    def __init__(self, request: _Request, index: int, enc):
        self.request, self.index, self.enc = request, index, enc
        self.length = enc.length
        self.bucket = length_bucket(self.length)


class ModelSlot:
    """One served model's queue: the requests on their way through its tokenise and batch loops, and the admission
    that counts their work."""

    def __init__(self, model: ServedModel, admission: Admission, metrics: SlotMetrics):
        self.model, self.admission, self.metrics = model, admission, metrics
        self.name = model.name
        self.arrivals: list[_Request] = []  # submitted, not yet tokenised
        self.arrived = asyncio.Event()  # arrivals, or the tokeniser thread is free again
        self.tokenizing = False  # a round is in the tokeniser thread
        self.pending: list[_Item] = []  # tokenised, waiting for a batch
        self.wakeup = asyncio.Event()
        self.running = False  # a batch is in the worker thread
        self.busy_since: float | None = None  # the last batch's end, while inputs were left waiting behind it
        self.task: asyncio.Task | None = None
        self.tokenize_task: asyncio.Task | None = None

    def queued(self) -> int:
        """Inputs waiting for a batch, tokenised or not."""
        return len(self.pending) + sum(len(r.inputs) for r in self.arrivals)


class SlotMetrics:
    """One model's labelled metric children (looked up once, not per request)."""

    def __init__(self, m: Metrics, name: str):
        self.queue_seconds = m.queue_seconds.labels(name)
        self.inference_seconds = m.inference_seconds.labels(name)
        self.batch_size = m.batch_size.labels(name)
        self.batch_tokens = m.batch_tokens.labels(name)
        self._batch_shapes, self._name = m.batch_shapes, name
        self.input_tokens = m.input_tokens.labels(name)
        self.warmup_batches = m.warmup_batches.labels(name)
        self.dropped = m.dropped.labels(name)
        self.queued = m.queued.labels(name)

    def count_shape(self, size: int, length: int) -> None:
        """One forward pass of `size` inputs padded to `length` tokens."""
        self._batch_shapes.labels(self._name, str(size), str(length)).inc()


class Batcher:
    """The queues of every model slot of one engine: its worker thread (forward passes; the engine loads
    models on it too), its tokeniser thread, the requests submitted and not yet answered."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.requests: set[_Request] = set()  # submitted, not yet answered
        self.warming = False  # requests submitted now are the start-up warm-up's (kept out of the metrics)
        self._batch_id = 0
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="electric-infer")
        self.tokenizer_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="electric-tokenize")

    def start(self, slot: ModelSlot) -> None:
        """Start the slot's tokenise and batch loops."""
        slot.task = asyncio.create_task(self._batch_loop(slot), name=f"batcher-{slot.name}")
        slot.tokenize_task = asyncio.create_task(self._tokenize_loop(slot), name=f"tokenizer-{slot.name}")

    def unanswered(self) -> list[_Request]:
        return [r for r in self.requests if not r.future.done()]

    async def stop(self, slots) -> None:
        """Cancel the loops of `slots`, then stop the threads (the worker after its current batch)."""
        for slot in slots:
            for task in (slot.tokenize_task, slot.task):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        self.worker.shutdown(wait=True, cancel_futures=True)
        self.tokenizer_pool.shutdown(wait=False, cancel_futures=True)

    async def submit(self, slot: ModelSlot, inputs: list, truncate: bool, names: Callable[[int], str],
                     post: Callable[[Any, np.ndarray], Any], timing: Timing) -> list[Any]:
        """Admit one request's inputs (validated texts or pairs: Overloaded when it would miss its deadline) and
        queue them for tokenisation and batches; wait for all their results (or the client going away).
        `post(encoded, row)` makes one input's result."""
        loop = asyncio.get_running_loop()
        req = _Request(inputs, truncate, names, post, loop, timing)
        req.warmup = self.warming
        slot.admission.admit(req, inputs, check=not req.warmup)  # Overloaded: refused, nothing queued
        self.requests.add(req)
        slot.arrivals.append(req)
        slot.arrived.set()
        timer = loop.call_later(self.settings.request_timeout_s, self._expire, req)  # cheaper than wait_for
        try:
            return await req.future
        finally:
            timer.cancel()
            self.requests.discard(req)
            slot.admission.left(req)
            if not req.future.done():
                req.future.cancel()  # the client went away: drop its queued inputs

    def _expire(self, req: _Request) -> None:
        """request_timeout_s is over: the request fails with Timeout, its queued inputs are dropped."""
        if not req.future.done():
            req.future.set_exception(Timeout(f"no answer within {self.settings.request_timeout_s:g} s"))

    async def _tokenize_loop(self, slot: ModelSlot) -> None:
        """Tokenise every request that arrived since the last round in one round, then queue their inputs: a small
        round on the loop when the model is idle, any other in the tokeniser thread (one round at a time) while the
        loop goes on; while a round is in the thread, a small request is tokenised on the loop at once and a big one
        waits for the next round."""
        while True:
            reqs = [r for r in slot.arrivals if not r.future.done()]
            if slot.tokenizing:
                slot.arrivals = [r for r in reqs if r.chars > INLINE_TOKENIZE_CHARS]
                small = [r for r in reqs if r.chars <= INLINE_TOKENIZE_CHARS]
                if small:
                    self._tokenize_inline(slot, small)
            elif reqs:
                slot.arrivals = []
                if not slot.running and not slot.pending and sum(r.chars for r in reqs) <= INLINE_TOKENIZE_CHARS:
                    self._tokenize_inline(slot, reqs)
                else:
                    self._tokenize_in_thread(slot, reqs)
                continue
            else:
                slot.arrivals = []
            slot.arrived.clear()
            await slot.arrived.wait()

    def _tokenize_inline(self, slot: ModelSlot, reqs: list[_Request]) -> None:
        """Tokenise a small round on the event loop (a thread hop would cost more) and queue its inputs."""
        t0 = time.perf_counter()
        try:
            encoded = _tokenize(slot, reqs)
        except Exception as e:  # noqa: BLE001 - fails this round's requests, not the server
            _tokenizing_failed(slot, reqs, e)
            return
        self._enqueue(slot, reqs, encoded, time.perf_counter() - t0)

    def _tokenize_in_thread(self, slot: ModelSlot, reqs: list[_Request]) -> None:
        """Start a round in the tokeniser thread; its end queues its inputs and wakes the tokenise loop."""
        slot.tokenizing = True
        done = functools.partial(self._tokenized_in_thread, slot, reqs, time.perf_counter())
        asyncio.get_running_loop().run_in_executor(self.tokenizer_pool, _tokenize, slot, reqs).add_done_callback(done)

    def _tokenized_in_thread(self, slot: ModelSlot, reqs: list[_Request], t0: float, future: asyncio.Future) -> None:
        slot.tokenizing = False
        slot.arrived.set()
        if future.cancelled():  # the server stops
            return
        e = future.exception()
        if e is not None:
            _tokenizing_failed(slot, reqs, e)  # fails this round's requests, not the server
            return
        self._enqueue(slot, reqs, future.result(), time.perf_counter() - t0)

    def _enqueue(self, slot: ModelSlot, reqs: list[_Request], encoded: list, seconds: float) -> None:
        """Queue the tokenised inputs of a round's requests; fail the ones with an input over the limit."""
        n_tokens, chars, tokens = 0, 0, 0
        for req, enc in zip(reqs, encoded, strict=True):
            if req.future.done():
                continue
            t = req.timing
            t.tokenize += seconds
            if isinstance(enc, InputTooLongError):
                req.future.set_exception(ValidationError(
                    f"{req.names(enc.index)} has {enc.describe('the limit')}; shorten it or send \"truncate\": true"))
                continue
            empty = _first_blank(req, enc)
            if empty is not None:  # the answer of a blank text: no 0.0 score that could win a rerank
                req.future.set_exception(ValidationError(f"{empty} is empty once tokenised: it has only characters "
                                                         f"the tokenizer drops (zero-width, control or lone "
                                                         f"combining characters)"))
                continue
            slot.admission.tokenised(req, [e.length for e in enc])
            whole = [(x, e) for x, e in zip(req.inputs, enc, strict=True) if e.length < slot.model.max_tokens]
            chars += sum(input_chars(x) for x, _ in whole)
            tokens += sum(e.length - 2 for _, e in whole)
            n = sum(e.length for e in enc)
            t.inputs += len(enc)
            t.tokens += n
            n_tokens += 0 if req.warmup else n
            slot.pending.extend(_Item(req, i, e) for i, e in enumerate(enc))
        slot.admission.learn(chars, tokens)  # inputs that were not truncated
        slot.metrics.input_tokens.inc(n_tokens)
        slot.wakeup.set()

    async def _batch_loop(self, slot: ModelSlot) -> None:
        max_wait = self.settings.max_wait_ms / 1000.0
        while True:
            if not slot.pending:
                slot.wakeup.clear()
                await slot.wakeup.wait()
                continue
            if max_wait:
                waited = time.perf_counter() - slot.pending[0].request.t_enqueued
                if waited < max_wait and not self._full(slot):
                    await asyncio.sleep(max_wait - waited)
            batch = self.take_batch(slot)
            if batch:
                await self._run_batch(slot, batch)

    def _full(self, slot: ModelSlot) -> bool:
        n, longest = len(slot.pending), max(it.length for it in slot.pending)
        return n >= self.settings.max_batch_size or n * longest >= self.settings.max_batch_tokens

    def take_batch(self, slot: ModelSlot) -> list[_Item]:
        """Round robin over requests (each request's first waiting input, oldest request first, then their
        second ones, ...), so a small request is never starved by big ones queued before it: every request's
        first waiting input, then more of the oldest one's length bucket, then shorter ones, within
        max_batch_size inputs, max_batch_tokens padded tokens and, once the model's pace at that length is measured,
        max_batch_seconds: a request arriving while a batch runs then waits for at most that long a pass, however
        long its neighbours' inputs are."""
        live = [it for it in slot.pending if not it.request.future.done()]
        dropped = len(slot.pending) - len(live)
        if dropped:
            slot.metrics.dropped.inc(dropped)
        if not live:
            slot.pending = []
            return []
        s = self.settings
        rounds: list[list[_Item]] = []  # rounds[k]: the k-th waiting input of each request, oldest request first
        seen: dict[int, int] = {}
        for it in live:
            k = seen[id(it.request)] = seen.get(id(it.request), -1) + 1
            if k == len(rounds):
                rounds.append([])
            rounds[k].append(it)
        # every request's first waiting input, then more of the first one's length bucket, then shorter ones: a small
        # request rides in the next batch even beside big requests' long inputs (one input padded, at most)
        later = [it for r in rounds[1:] for it in r]
        anchor = rounds[0][0].bucket
        order = rounds[0] + [it for it in later if it.bucket == anchor] + [it for it in later if it.bucket < anchor]
        pace = slot.admission.pace
        per_unit = pace.seconds_per_unit() if s.max_batch_seconds else None  # seconds per unit of work, per bucket
        batch: list[_Item] = []
        longest, units = 0, 0.0
        for it in order:
            new_longest, new_units = max(longest, it.length), units + cost(it.length, pace.hidden_size)
            if batch and (len(batch) + 1 > s.max_batch_size or (len(batch) + 1) * new_longest > s.max_batch_tokens
                          or per_unit is not None and new_units * per_unit[
                              pace.index(slot.model.padded_length(new_longest))] > s.max_batch_seconds):
                continue  # a shorter one may still fit
            batch.append(it)
            longest, units = new_longest, new_units
        taken = set(map(id, batch))
        slot.pending = [it for it in live if id(it) not in taken]
        return batch

    async def _run_batch(self, slot: ModelSlot, batch: list[_Item]) -> None:
        self._batch_id += 1
        batch_id = self._batch_id
        t0 = time.perf_counter()
        for it in batch:
            req = it.request
            if not req.started:
                req.started = True
                req.timing.queue = max(0.0, t0 - req.t_enqueued - req.timing.tokenize)
                if not req.warmup:
                    slot.metrics.queue_seconds.observe(req.timing.queue)
        slot.running = True
        try:
            outputs = await asyncio.get_running_loop().run_in_executor(self.worker, _forward, slot, batch)
        except Exception as e:  # noqa: BLE001 - a backend failure fails this batch's requests, not the server
            log.exception("batch of %d on %s failed", len(batch), slot.name)
            err = BackendError(f"the model {slot.name!r} failed on a batch of {len(batch)} "
                               f"({type(e).__name__})")
            for it in batch:
                if not it.request.future.done():
                    it.request.future.set_exception(err)
            return
        finally:
            slot.running = False
        t_end = time.perf_counter()
        dt = t_end - t0
        # the pace admission predicts with: from the previous batch's end when inputs were waiting then, so that
        # what keeps the worker from the next batch under load (the event loop parsing bodies, tokenising) counts
        longest = max(it.length for it in batch)
        slot.admission.ran([(it.request, it.length) for it in batch], slot.model.padded_length(longest),
                           t_end - (slot.busy_since if slot.busy_since is not None else t0),
                           served=not all(it.request.warmup for it in batch))
        slot.busy_since = t_end if slot.pending else None
        m = slot.metrics
        if all(it.request.warmup for it in batch):
            m.warmup_batches.inc()
        else:
            m.inference_seconds.observe(dt)
            m.batch_size.observe(len(batch))
            m.batch_tokens.observe(len(batch) * longest)
            m.count_shape(len(batch), slot.model.padded_length(longest))
        for it, out in zip(batch, outputs, strict=True):
            req = it.request
            if req.future.done():
                continue
            if req.last_batch != batch_id:
                req.last_batch = batch_id
                req.timing.inference += dt
                req.timing.batches += 1
            if isinstance(out, ServerError):
                req.future.set_exception(out)
                continue
            req.results[it.index] = out
            req.remaining -= 1
            if req.remaining == 0:
                req.future.set_result(req.results)


def _tokenizing_failed(slot: ModelSlot, reqs: list[_Request], e: BaseException) -> None:
    log.error("tokenising %d requests for %s failed", len(reqs), slot.name, exc_info=e)
    err = BackendError(f"tokenisation failed ({type(e).__name__})")
    for r in reqs:
        if not r.future.done():
            r.future.set_exception(err)


def _first_blank(req: _Request, enc: list) -> str | None:
    """The name of a request's first input the tokenizer kept nothing of - a text (`input 2`), or one side of a pair
    (`pairs[0][1]`), as its text alone would be - else None."""
    for e in enc:
        if isinstance(e, Encoded) and e.num_candidates == 0:
            return req.names(e.index)
        if isinstance(e, PairEncoded) and e.blank_side is not None:
            return f"{req.names(e.index)}[{e.blank_side}]"
    return None


def _tokenize(slot: ModelSlot, reqs: list[_Request]) -> list:
    """Tokeniser thread (or the loop, for a small round): encode_requests over the round's requests."""
    return encode_requests(slot.model.tokenizer, [(r.inputs, r.truncate) for r in reqs], slot.model.max_tokens)


def _forward(slot: ModelSlot, batch: list[_Item]) -> list[Any]:
    """Worker thread: pad (once, to the backend's own length bucket), run the model once, post-process each
    input's row (each reads its own first `length` positions)."""
    model = slot.model
    ids, mask = pad_rows([it.enc.input_ids for it in batch], model.pad_id,
                         model.padded_length(max(it.length for it in batch)))  # (B, T)
    tt = None
    if any(isinstance(it.enc, PairEncoded) for it in batch):
        rows = [it.enc.token_type_ids if isinstance(it.enc, PairEncoded) else () for it in batch]  # (T,) or ()
        # electric.batching.pad_values pads arrays as well as lists, though its hint says Sequence[Sequence[int]]
        tt = pad_values(rows, 0, ids.shape[1])  # type: ignore[arg-type]  # (B, T)
    logits = np.asarray(model.backend.run(ids, mask, tt))
    if logits.shape[0] != len(batch):
        raise ValueError(f"backend returned {logits.shape[0]} rows for a batch of {len(batch)}")
    out = []
    for b, it in enumerate(batch):
        try:
            out.append(it.request.post(it.enc, logits[b]))
        except Exception as e:  # noqa: BLE001 - one input's post-processing failure fails its request only
            log.exception("post-processing failed on %s", slot.name)
            out.append(BackendError(f"post-processing failed ({type(e).__name__})"))
    return out
