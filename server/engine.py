"""The engine: one per process, shared by the HTTP and gRPC transports.

    transports ──▶ Engine.score/detect/rerank/classify ──▶ per-model queue ──▶ worker thread ──▶ backend.run

- Admission control: at most `max_concurrent_requests` requests in flight; the next one fails at once
  with `Overloaded` (429 / RESOURCE_EXHAUSTED) instead of queueing without bound.
- Validation: input count, empty or non-text inputs, token limits (the index and length of the first
  input that is too long) - in one place, so both transports answer the same.
- Batching: every input of every request goes into its model's queue. When the worker is free, the
  batcher takes the oldest input, then more from the same length bucket (powers of two) and then from
  shorter buckets, while the batch stays within `max_batch_tokens` padded tokens and `max_batch_size`
  inputs. Inputs that arrive while a batch runs are batched together next (continuous batching);
  `max_wait_ms` > 0 also lets an idle worker wait that long for company.
- Cancellation: when a client goes away (HTTP disconnect, gRPC cancel, timeout) its queued inputs are
  dropped before they reach the model.
- Tokenisation: the inputs of all the requests that arrived since the last round are tokenised together,
  with one call of the Rust batch encoder (server.pipelines.encode_requests), in a tokeniser thread - on
  the event loop only when the round is small and the model idle (a thread hop costs more latency than
  that; under load the loop's time matters more). An input over the token limit
  fails its request (naming the first such input) before anything reaches the model.
- Inference (padding, forward pass and per-input post-processing) runs in one worker thread, off the
  event loop.
- Lifecycle: `start()` loads and warms every model, then `ready` turns true; `begin_shutdown()` refuses
  new requests and, once `shutdown_grace_s` has passed, fails the requests still in flight with
  `ShuttingDown`; `close()` waits for the queued inputs of admitted requests, then stops the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from electric import __version__
from electric.batching import length_bucket, pad_rows, pad_values
from electric.evaluation.nbest import PRIORS, NBestList, Weights, rerank_lists
from electric.inference import classify
from electric.inference.backend import load_backend, resolve_backend
from electric.inference.calibration import describe as describe_calibration
from electric.inference.scoring import (
    METHODS_OF_KIND,
    Encoded,
    InputTooLongError,
    electra_detect,
    resolve_model_dir,
    score_row,
)
from server import pipelines
from server.errors import (
    BackendError,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    ServerError,
    ShuttingDown,
    Timeout,
    ValidationError,
)
from server.metrics import Metrics
from server.settings import MAX_ABS_RERANK_SCORE, MAX_ABS_RERANK_WEIGHT, Settings

log = logging.getLogger("electric.server")

SCORER = "scorer"  # name of the --model in /info and in responses
SCORER_KINDS = tuple(METHODS_OF_KIND)  # what --model may hold: a discriminator (electric) or a cloze model (cloze)
INLINE_TOKENIZE_CHARS = 256  # tokenisation rounds with more characters run in the tokeniser thread
WARMUP_TEXT = "the quick brown fox jumps over the lazy dog near the river bank"


@dataclass
class Timing:
    """Where one request's time went (seconds); sent back as x-*-time headers / metadata."""

    tokenize: float = 0.0  # the tokenisation round that carried its inputs
    queue: float = 0.0  # from submission until its first batch started, less its tokenisation
    inference: float = 0.0  # summed duration of the batches that carried its inputs
    batches: int = 0
    inputs: int = 0
    tokens: int = 0


@dataclass
class Answer:
    model: str
    results: list[Any]
    timing: Timing
    extra: dict[str, Any] = field(default_factory=dict)


class _Request:
    """One call's inputs (texts or pairs) on their way through tokenisation and batches. `post(encoded, row)`
    turns one input's row of logits into its result; `names(i)` names input i in error messages."""

    __slots__ = ("inputs", "truncate", "names", "post", "future", "results", "remaining", "timing", "t_enqueued",
                 "last_batch", "started", "warmup")

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


class _Item:
    """One tokenised input (`Encoded` or `PairEncoded`) waiting for a batch."""

    __slots__ = ("request", "index", "enc", "length", "bucket")

    def __init__(self, request: _Request, index: int, enc):
        self.request, self.index, self.enc = request, index, enc
        self.length = enc.length
        self.bucket = length_bucket(self.length)


class ModelSlot:
    """One loaded model, its queue and its batching loop."""

    def __init__(self, name: str, path: Path, backend, settings: Settings):
        self.name, self.path, self.backend = name, path, backend
        self.kind: str = backend.kind
        self.tokenizer = backend.tokenizer
        self.pad_id = int(self.tokenizer.pad_token_id or 0)
        limit = settings.max_tokens_per_input or int(backend.max_length)
        self.max_tokens = min(limit, int(backend.max_length), settings.max_batch_tokens)
        self.labels = classify.label_names(backend.config) if self.kind in ("classifier", "tagger") else []
        self.method = METHODS_OF_KIND[self.kind][0] if self.kind in METHODS_OF_KIND else None  # /v1/score's method
        num_outputs = int(backend.config.get("num_labels") or len(self.labels) or 2)
        self.regression = self.kind == "classifier" and classify.is_regression(backend.config, num_outputs)
        self.calibration = getattr(backend, "calibration", None)  # detect's P(replaced) (electric.inference.calibration)
        self.arrivals: list[_Request] = []  # submitted, not yet tokenised
        self.arrived = asyncio.Event()
        self.pending: list[_Item] = []  # tokenised, waiting for a batch
        self.wakeup = asyncio.Event()
        self.running = False  # a batch is in the worker thread
        self.task: asyncio.Task | None = None
        self.tokenize_task: asyncio.Task | None = None
        self.metrics: _SlotMetrics | None = None

    def queued(self) -> int:
        """Inputs waiting for a batch, tokenised or not."""
        return len(self.pending) + sum(len(r.inputs) for r in self.arrivals)

    def info(self) -> dict:
        return {"name": self.name, "kind": self.kind, "method": self.method, "path": str(self.path),
                "backend": "onnx" if type(self.backend).__name__.lower().startswith("onnx") else "torch",
                "max_length": self.max_tokens, "providers": list(self.backend.providers),
                "labels": self.labels, "regression": self.regression}


class _SlotMetrics:
    """One model's labelled metric children (looked up once, not per request)."""

    def __init__(self, m: Metrics, name: str):
        self.queue_seconds = m.queue_seconds.labels(name)
        self.inference_seconds = m.inference_seconds.labels(name)
        self.batch_size = m.batch_size.labels(name)
        self.batch_tokens = m.batch_tokens.labels(name)
        self.input_tokens = m.input_tokens.labels(name)
        self.warmup_batches = m.warmup_batches.labels(name)
        self.dropped = m.dropped.labels(name)
        self.queued = m.queued.labels(name)


class Engine:
    def __init__(self, settings: Settings, metrics: Metrics | None = None,
                 loader: Callable[[Path, str], Any] | None = None):
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._loader = loader or self._load
        self.models: dict[str, ModelSlot] = {}
        self.ready = False
        self.draining = False
        self.failed: BaseException | None = None
        self.in_flight = 0
        self._requests: set[_Request] = set()  # submitted, not yet answered
        self._shutdown_at: float | None = None  # time.monotonic() of begin_shutdown
        self.grace_over = False  # shutdown_grace_s has passed since begin_shutdown
        self._batch_id = 0
        self._warming = False  # requests submitted now are the warm-up's
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="electric-infer")
        self._tokenizer_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="electric-tokenize")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self.metrics.in_flight.set_function(lambda: self.in_flight)  # read when scraped, not set per request

    def _load(self, path: Path, backend: str):
        """electric.inference.backend.load_backend, with the ONNX Runtime options when the directory is an export."""
        kwargs = {}
        if resolve_backend(path, backend) == "onnx":
            if self.settings.providers:
                kwargs["providers"] = self.settings.providers
            if self.settings.threads:
                kwargs["threads"] = self.settings.threads
        return load_backend(path, backend, **kwargs)

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load every model (in a thread), start its batcher, warm it up, then turn ready."""
        self._loop = asyncio.get_running_loop()
        try:
            specs: list[tuple[str, Path, tuple[str, ...]]] = []
            if self.settings.model is not None:
                specs.append((SCORER, resolve_model_dir(self.settings.model, "electric"), SCORER_KINDS))
            specs += [(n, Path(p), ("classifier", "tagger")) for n, p in self.settings.classifiers.items()]
            for name, path, kinds in specs:
                t0 = time.perf_counter()
                backend = await self._loop.run_in_executor(self._worker, self._loader, path, self.settings.backend)
                if backend.kind not in kinds:
                    what = "--model" if name == SCORER else f"--classifier {name}"
                    raise ValueError(f"{what}: {str(path)!r} holds a {backend.kind} model; expected "
                                     f"{' or '.join(kinds)}")
                slot = ModelSlot(name, path, backend, self.settings)
                slot.metrics = _SlotMetrics(self.metrics, name)
                slot.metrics.queued.set_function(slot.queued)
                self.models[name] = slot
                slot.task = asyncio.create_task(self._batch_loop(slot), name=f"batcher-{name}")
                slot.tokenize_task = asyncio.create_task(self._tokenize_loop(slot), name=f"tokenizer-{name}")
                log.info("loaded %s (%s, %s) from %s in %.1f s", name, slot.kind, ",".join(backend.providers), path,
                         time.perf_counter() - t0)
                if slot.kind == "discriminator":
                    log.info("%s: detect probabilities are %s", name, describe_calibration(slot.calibration))
            if self.settings.warmup:
                await self._warmup()
        except Exception as e:  # noqa: BLE001 - reported by /health and the process exit code
            self.failed = e
            log.error("could not start: %s", e)
            raise
        self.ready = not self.draining
        self.metrics.ready.set(1 if self.ready else 0)

    async def _warmup(self) -> None:
        t0 = time.perf_counter()
        self._warming = True
        try:
            await self._warm_every_model()
        finally:
            self._warming = False
        log.info("warmed up in %.2f s", time.perf_counter() - t0)

    async def _warm_every_model(self) -> None:
        for slot in self.models.values():
            s = self.settings
            n = max(1, min(s.max_batch_size, s.max_inputs_per_request, s.max_batch_tokens // 64, 32))
            for batch in ([WARMUP_TEXT[:20]], [WARMUP_TEXT] * n):
                if slot.kind in SCORER_KINDS:
                    await self.score(batch, truncate=True, _internal=True)
                    if slot.kind == "discriminator":
                        await self.detect(batch, truncate=True, _internal=True)
                else:
                    await self.classify(slot.name, texts=batch, truncate=True, _internal=True)

    def begin_shutdown(self) -> None:
        """Refuse new requests (503); admitted ones may finish within shutdown_grace_s, then they fail with
        `ShuttingDown`. Safe to call from a signal handler, and more than once."""
        if self._shutdown_at is None:
            log.info("shutting down: refusing new requests, finishing %d in flight", self.in_flight)
            self._shutdown_at = time.monotonic()
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._arm_grace)
        self.draining = True
        self.ready = False
        self.metrics.ready.set(0)

    def grace_left(self) -> float:
        """Seconds of shutdown_grace_s left (all of it before begin_shutdown)."""
        elapsed = 0.0 if self._shutdown_at is None else time.monotonic() - self._shutdown_at
        return max(0.0, self.settings.shutdown_grace_s - elapsed)

    def _arm_grace(self) -> None:
        self._loop.call_later(self.grace_left(), self._end_grace)

    def _end_grace(self) -> None:
        """The grace period is over: answer every request still in flight with ShuttingDown."""
        self.grace_over = True
        cut = [r for r in self._requests if not r.future.done()]
        if cut:
            log.warning("shutdown grace of %g s is over: failing %d requests still in flight",
                        self.settings.shutdown_grace_s, len(cut))
        for r in cut:
            r.future.set_exception(ShuttingDown.after_grace(self.settings.shutdown_grace_s))

    async def close(self, timeout: float | None = None) -> None:
        """Wait (up to `timeout`) for admitted requests to finish, then stop the batchers and threads."""
        self.begin_shutdown()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
        for slot in self.models.values():
            for task in (slot.tokenize_task, slot.task):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
        self._worker.shutdown(wait=True, cancel_futures=True)
        self._tokenizer_pool.shutdown(wait=False, cancel_futures=True)

    # ---- admission and validation ----------------------------------------------------------------

    @contextlib.contextmanager
    def _admitted(self, internal: bool = False):
        if not internal:
            if not self.ready:
                if self.draining:
                    raise ShuttingDown("the server is shutting down; retry")
                raise NotReady("the models are still loading" if self.failed is None else
                               f"the models failed to load: {self.failed}")
            if self.in_flight >= self.settings.max_concurrent_requests:
                raise Overloaded(f"{self.in_flight} requests in flight, the limit is "
                                 f"{self.settings.max_concurrent_requests}; retry later")
        self.in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()

    def _slot(self, name: str | None, kinds: tuple[str, ...]) -> ModelSlot:
        if name is None:  # the scorer
            slot = self.models.get(SCORER)
            if slot is None:
                raise ValidationError("this server has no scoring model (start it with --model DIR)")
            return slot
        classifiers = [n for n, s in self.models.items() if s.kind in kinds]
        if not name:
            if len(classifiers) == 1:
                return self.models[classifiers[0]]
            raise ValidationError(f"say which classifier with \"model\": one of {classifiers}" if classifiers
                                  else "this server has no classifier (start it with --classifier NAME=DIR)")
        if name not in classifiers:
            raise ValidationError(f"unknown classifier {name!r}; this server has {classifiers or 'none'}")
        return self.models[name]

    def _check_count(self, n: int, what: str) -> None:
        if n == 0:
            raise ValidationError(f"no {what} given")
        if n > self.settings.max_inputs_per_request:
            raise PayloadTooLarge(f"{n} {what} in one request, the limit is {self.settings.max_inputs_per_request}")

    def _check_text(self, text: object, name: str) -> None:
        if not isinstance(text, str):
            raise ValidationError(f"{name} is a {type(text).__name__}, expected a string")
        if not text.strip():
            raise ValidationError(f"{name} is empty")
        if len(text) > self.settings.max_input_chars:
            raise ValidationError(f"{name} has {len(text)} characters, more than the limit of "
                                  f"{self.settings.max_input_chars} (max_input_chars), even with truncate")

    # ---- the four calls ----------------------------------------------------------------------------

    async def score(self, texts: Sequence[str], *, per_token: bool = False, truncate: bool = False,
                    _internal: bool = False) -> Answer:
        """The served method's score of each text (electric.inference.scoring.score_row: the Electric PLL of a
        discriminator, the cloze score of a cloze model)."""
        with self._admitted(_internal):
            slot = self._slot(None, SCORER_KINDS)
            texts = self._texts(texts, "texts")
            timing = Timing()
            results = await self._submit(slot, texts, truncate, _input_name, _post_score(slot, per_token), timing)
            return Answer(slot.name, results, timing)

    async def detect(self, texts: Sequence[str], *, truncate: bool = False, _internal: bool = False) -> Answer:
        """ELECTRA replaced-token probabilities (electric.inference.scoring.electra_detect)."""
        with self._admitted(_internal):
            slot = self._slot(None, ("discriminator",))
            if slot.kind != "discriminator":
                raise ValidationError(f"this server's model is a {slot.kind} model ({slot.method} scores: /v1/score, "
                                      "/v1/rerank); replaced-token detection needs a discriminator")
            texts = self._texts(texts, "texts")
            timing = Timing()
            results = await self._submit(slot, texts, truncate, _input_name, _post_detect(slot), timing)
            return Answer(slot.name, results, timing)

    async def rerank(self, lists: Sequence[tuple[str | None, Sequence[str], Sequence[float] | None]], *,
                     lm_weight: float | None = None, length_weight: float | None = None,
                     beta: float | None = None, prior: str | None = None, truncate: bool = False) -> Answer:
        """Score every hypothesis of every list (id, hypotheses, first-pass scores or None) in one submission,
        then reorder each list with electric.evaluation.nbest.rerank_lists, as `electric rerank` does. `prior` ("rank" or
        "none"): whether a list without scores gets -beta * rank."""
        with self._admitted():
            slot = self._slot(None, SCORER_KINDS)
            if not lists:
                raise ValidationError("no n-best lists given")
            flat, where, nbests = [], [], []
            for i, (utt_id, hyps, scores) in enumerate(lists):
                if not hyps:
                    raise ValidationError(f"lists[{i}] has no hypotheses")
                if scores is not None and len(scores) != len(hyps):
                    raise ValidationError(f"lists[{i}] has {len(hyps)} hypotheses but {len(scores)} scores")
                for k, x in enumerate(scores or ()):
                    _check_range(x, MAX_ABS_RERANK_SCORE, f"lists[{i}].scores[{k}]")
                for j, h in enumerate(hyps):
                    self._check_text(h, f"lists[{i}].hypotheses[{j}]")
                    flat.append(h)
                    where.append((i, j))
                nbests.append(NBestList(str(i) if utt_id is None else utt_id, list(hyps),
                                        None if scores is None else [float(s) for s in scores]))
            self._check_count(len(flat), "hypotheses")
            s = self.settings
            for name, w in (("weights.lm", lm_weight), ("weights.length", length_weight), ("weights.beta", beta)):
                if w is not None:
                    _check_range(w, MAX_ABS_RERANK_WEIGHT, name)
            if prior is not None and prior not in PRIORS:
                raise ValidationError(f"weights.prior must be one of {', '.join(PRIORS)}, got {prior!r}")
            weights = Weights(lm=s.lm_weight if lm_weight is None else lm_weight,
                              length=s.length_weight if length_weight is None else length_weight,
                              beta=s.beta if beta is None else beta, prior=s.prior if prior is None else prior)
            timing = Timing()
            scored = await self._submit(slot, flat, truncate, lambda k: "lists[{}].hypotheses[{}]".format(*where[k]),
                                        _post_score(slot, False), timing)
            lm = [np.zeros(len(nb.hyps)) for nb in nbests]
            for (i, j), r in zip(where, scored, strict=True):
                lm[i][j] = r.score
            applied = {k: v for k, v in weights.to_dict().items() if k != "piece"}  # no piece bonus served
            return Answer(slot.name, rerank_lists(nbests, lm, weights), timing, {"weights": applied})

    async def classify(self, model: str | None, *, texts: Sequence[str] | None = None,
                       pairs: Sequence[tuple[str, str]] | None = None, truncate: bool = False,
                       _internal: bool = False) -> Answer:
        """Label probabilities (or a regression value, or per-token labels) from the classifier `model`."""
        with self._admitted(_internal):
            slot = self._slot(model or "", ("classifier", "tagger"))
            if (texts is None) == (pairs is None) or (texts is not None and pairs is not None):
                raise ValidationError("give either \"texts\" or \"pairs\"")
            timing = Timing()
            if texts is not None:
                inputs, names, post = self._texts(texts, "texts"), _input_name, _post_classify(slot)
            else:
                if slot.kind == "tagger":
                    raise ValidationError(f"classifier {slot.name!r} tags tokens of single texts; send \"texts\"")
                self._check_count(len(pairs), "pairs")
                for i, p in enumerate(pairs):
                    if not isinstance(p, (list, tuple)) or len(p) != 2:
                        raise ValidationError(f"pairs[{i}] is not a pair of two texts")
                    self._check_text(p[0], f"pairs[{i}][0]")
                    self._check_text(p[1], f"pairs[{i}][1]")
                inputs, names, post = [tuple(p) for p in pairs], lambda i: f"pairs[{i}]", _post_pair(slot)
            results = await self._submit(slot, inputs, truncate, names, post, timing)
            return Answer(slot.name, results, timing)

    def _texts(self, texts: Sequence[str], what: str) -> list[str]:
        texts = list(texts)
        self._check_count(len(texts), what)
        for i, t in enumerate(texts):
            self._check_text(t, f"input {i}")
        return texts

    def info(self) -> dict:
        s = self.settings
        return {"version": __version__, "ready": self.ready, "models": [m.info() for m in self.models.values()],
                "limits": {"max_inputs_per_request": s.max_inputs_per_request,
                           "max_tokens_per_input": min((m.max_tokens for m in self.models.values()),
                                                       default=s.max_tokens_per_input),
                           "max_input_chars": s.max_input_chars,
                           "max_batch_tokens": s.max_batch_tokens, "max_batch_size": s.max_batch_size,
                           "max_concurrent_requests": s.max_concurrent_requests, "max_body_bytes": s.max_body_bytes,
                           "max_wait_ms": s.max_wait_ms, "request_timeout_s": s.request_timeout_s},
                "rerank_defaults": {"lm": s.lm_weight, "length": s.length_weight, "beta": s.beta, "prior": s.prior}}

    # ---- queue and batches ---------------------------------------------------------------------------

    async def _submit(self, slot: ModelSlot, inputs: list, truncate: bool, names: Callable[[int], str],
                      post: Callable[[Any, np.ndarray], Any], timing: Timing) -> list[Any]:
        """Queue one request's inputs (validated texts or pairs) for tokenisation and batches; wait for all their
        results (or the client going away). `post(encoded, row)` makes one input's result."""
        if self.grace_over:
            raise ShuttingDown.after_grace(self.settings.shutdown_grace_s)
        loop = asyncio.get_running_loop()
        req = _Request(inputs, truncate, names, post, loop, timing)
        req.warmup = self._warming
        self._requests.add(req)
        slot.arrivals.append(req)
        slot.arrived.set()
        timer = loop.call_later(self.settings.request_timeout_s, self._expire, req)  # cheaper than wait_for
        try:
            return await req.future
        finally:
            timer.cancel()
            self._requests.discard(req)
            if not req.future.done():
                req.future.cancel()  # the client went away: drop its queued inputs

    def _expire(self, req: _Request) -> None:
        """request_timeout_s is over: the request fails with Timeout, its queued inputs are dropped."""
        if not req.future.done():
            req.future.set_exception(Timeout(f"no answer within {self.settings.request_timeout_s:g} s"))

    async def _tokenize_loop(self, slot: ModelSlot) -> None:
        """Tokenise every request that arrived since the last round in one round, then queue their inputs."""
        while True:
            if not slot.arrivals:
                slot.arrived.clear()
                await slot.arrived.wait()
                continue
            reqs = [r for r in slot.arrivals if not r.future.done()]
            slot.arrivals = []
            if not reqs:
                continue
            # on the loop only when the model is idle (latency); under load the thread takes it (loop time)
            inline = not slot.running and not slot.pending and \
                sum(len(x) if isinstance(x, str) else len(x[0]) + len(x[1]) for r in reqs for x in r.inputs) \
                <= INLINE_TOKENIZE_CHARS
            t0 = time.perf_counter()
            try:
                if inline:
                    encoded = _tokenize(slot, reqs)
                else:
                    encoded = await asyncio.get_running_loop().run_in_executor(self._tokenizer_pool, _tokenize, slot,
                                                                               reqs)
            except Exception as e:  # noqa: BLE001 - fails this round's requests, not the server
                log.exception("tokenising %d requests for %s failed", len(reqs), slot.name)
                err = BackendError(f"tokenisation failed ({type(e).__name__})")
                for r in reqs:
                    if not r.future.done():
                        r.future.set_exception(err)
                continue
            self._enqueue(slot, reqs, encoded, time.perf_counter() - t0)

    def _enqueue(self, slot: ModelSlot, reqs: list[_Request], encoded: list, seconds: float) -> None:
        """Queue the tokenised inputs of a round's requests; fail the ones with an input over the limit."""
        n_tokens = 0
        for req, enc in zip(reqs, encoded, strict=True):
            if req.future.done():
                continue
            t = req.timing
            t.tokenize += seconds
            if isinstance(enc, InputTooLongError):
                req.future.set_exception(ValidationError(
                    f"{req.names(enc.index)} has {enc.count()} tokens ([CLS] and [SEP] included), more than the "
                    f"limit of {enc.max_length}; shorten it or send \"truncate\": true"))
                continue
            empty = next((e for e in enc if isinstance(e, Encoded) and e.num_candidates == 0), None)
            if empty is not None:  # the answer of a blank text: no 0.0 score that could win a rerank
                req.future.set_exception(ValidationError(f"{req.names(empty.index)} is empty once tokenised: it "
                                                         f"has only characters the tokenizer drops (zero-width, "
                                                         f"control or lone combining characters)"))
                continue
            tokens = sum(e.length for e in enc)
            t.inputs += len(enc)
            t.tokens += tokens
            n_tokens += 0 if req.warmup else tokens
            slot.pending.extend(_Item(req, i, e) for i, e in enumerate(enc))
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
            batch = self._take_batch(slot)
            if batch:
                await self._run_batch(slot, batch)

    def _full(self, slot: ModelSlot) -> bool:
        n, longest = len(slot.pending), max(it.length for it in slot.pending)
        return n >= self.settings.max_batch_size or n * longest >= self.settings.max_batch_tokens

    def _take_batch(self, slot: ModelSlot) -> list[_Item]:
        """Round robin over requests (each request's first waiting input, oldest request first, then their
        second ones, ...), so a small request is never starved by big ones queued before it: the first of
        that order, then more of its length bucket, then shorter ones, within max_batch_size inputs and
        max_batch_tokens padded tokens."""
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
        fair = [it for r in rounds for it in r]
        anchor = fair[0].bucket
        order = [it for it in fair if it.bucket == anchor] + [it for it in fair if it.bucket < anchor]
        batch, longest = [], 0
        for it in order:
            new_longest = max(longest, it.length)
            if batch and (len(batch) + 1 > s.max_batch_size or (len(batch) + 1) * new_longest > s.max_batch_tokens):
                continue  # a shorter one may still fit
            batch.append(it)
            longest = new_longest
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
            outputs = await asyncio.get_running_loop().run_in_executor(self._worker, _forward, slot, batch)
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
        dt = time.perf_counter() - t0
        m = slot.metrics
        if all(it.request.warmup for it in batch):
            m.warmup_batches.inc()
        else:
            m.inference_seconds.observe(dt)
            m.batch_size.observe(len(batch))
            m.batch_tokens.observe(len(batch) * max(it.length for it in batch))
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


def _check_range(x: float, limit: float, name: str) -> None:
    """A rerank number within [-limit, limit] (settings.MAX_ABS_RERANK_*: totals cannot overflow), else a
    ValidationError naming it."""
    if not -limit <= x <= limit:
        raise ValidationError(f"{name}: should be between {-limit:g} and {limit:g}, got {x!r}")


def _tokenize(slot: ModelSlot, reqs: list[_Request]) -> list:
    """Tokeniser thread (or the loop, for a small round): pipelines.encode_requests over the round's requests."""
    return pipelines.encode_requests(slot.tokenizer, [(r.inputs, r.truncate) for r in reqs], slot.max_tokens)


def _forward(slot: ModelSlot, batch: list[_Item]) -> list[Any]:
    """Worker thread: pad (once, to the backend's own length bucket), run the model once, post-process each
    input's row (each reads its own first `length` positions)."""
    longest = max(it.length for it in batch)
    padded_length = getattr(slot.backend, "padded_length", None)  # ONNX: its bucket; torch: the longest row
    ids, mask = pad_rows([it.enc.input_ids for it in batch], slot.pad_id,
                         padded_length(longest) if padded_length else longest)  # (B, T)
    tt = None
    if any(isinstance(it.enc, pipelines.PairEncoded) for it in batch):
        tt = pad_values([it.enc.token_type_ids if isinstance(it.enc, pipelines.PairEncoded) else () for it in batch], 0,
                        ids.shape[1])  # (B, T)
    logits = np.asarray(slot.backend.run(ids, mask, tt))
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


def _input_name(i: int) -> str:
    return f"input {i}"


def _post_score(slot: ModelSlot, per_token: bool) -> Callable[[Any, np.ndarray], Any]:
    return lambda enc, row: score_row(enc, row, slot.method, per_token)


def _post_detect(slot: ModelSlot) -> Callable[[Any, np.ndarray], Any]:
    return lambda enc, row: electra_detect(enc, row, slot.calibration)


def _post_classify(slot: ModelSlot) -> Callable[[Any, np.ndarray], Any]:
    if slot.kind == "tagger":
        return lambda enc, row: classify.tag_row(slot.labels, enc, row)
    return _post_pair(slot)


def _post_pair(slot: ModelSlot) -> Callable[[Any, np.ndarray], Any]:
    return lambda enc, row: classify.classify_row(slot.labels, slot.regression, row, enc.truncated)
