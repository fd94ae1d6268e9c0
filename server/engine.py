"""The engine: one per process, shared by the HTTP and gRPC transports; admission, validation and the routes.

    transports ──▶ Engine.score/detect/rerank/classify ──▶ Batcher (server/batcher.py: per-model queue,
                   tokenise and batch loops) ──▶ worker thread ──▶ backend.run ──▶ server/pipelines.py post-processing

- Admission control: at most `max_concurrent_requests` requests in flight, and none predicted to finish after its
  deadline behind the work already admitted (each model's `server.admission.Admission`, which the batcher tells of
  every request as it arrives, is tokenised, runs and leaves); the next one fails at once with `Overloaded`
  (429 / RESOURCE_EXHAUSTED, with when to retry) instead of queueing without bound. Idle for IDLE_TRIM_S, the
  process gives the memory a burst freed back to the kernel.
- Validation: input count, empty or non-text inputs, token limits (the index and length of the first
  input that is too long) - in one place, so both transports answer the same.
- Routes: each call validates, picks its model's slot and its post-processing (server.pipelines), and submits
  its inputs to the batcher, which admits, tokenises, batches and runs them (see server/batcher.py).
- Lifecycle (server/lifecycle.py, the one state every part asks): `start()` loads and warms every model, then
  turns it ready; each call is admitted by its rule (`Lifecycle.admit`); when the drain's grace is over, the
  requests still in flight fail with `ShuttingDown`; `close()` waits for the queued inputs of admitted requests,
  then stops the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from electric import __version__
from electric.allocator import release_free_memory
from electric.checkpoint import serving_defaults
from electric.evaluation.arpa import ArpaLM
from electric.evaluation.nbest import LM_SCORES, PRIORS, NBestList, ScoredLists, Weights
from electric.inference.backend import Backend, load_backend, resolve_backend
from electric.inference.calibration import describe as describe_calibration
from electric.inference.scoring import METHODS_OF_KIND, model_dir_for_method
from server import pipelines
from server.admission import BIG_BODY_BYTES, MIN_RETRY_S, Admission
from server.batcher import Batcher, ModelSlot, SlotMetrics
from server.errors import Overloaded, ShuttingDown, ValidationError, check_count
from server.lifecycle import Lifecycle
from server.models import ServedModel
from server.prometheus import Metrics
from server.settings import MAX_ABS_RERANK_SCORE, MAX_ABS_RERANK_WEIGHT, Settings
from server.timing import Timing

log = logging.getLogger("electric.server")

SCORER = "scorer"  # name of the --model in /info and in responses
DETECTOR = "detector"  # name of the discriminator an adapted --model carries beside its cloze scorer (/v1/detect)
SCORER_KINDS = tuple(METHODS_OF_KIND)  # what --model may hold: a discriminator (electric) or a cloze model (cloze)
WARMUP_TEXT = "the quick brown fox jumps over the lazy dog near the river bank"
WARMUP_PACE_TOKENS = 2048  # tokens in each warm-up batch that measures the pace at one length (a row at least)
NGRAM_INLINE = 256  # texts an n-gram LM scores on the event loop; more go to a thread
IDLE_TRIM_S = 1.0  # idle this long after a request, the process gives its freed heap back (electric.allocator)


@dataclass
class Answer:
    model: str
    results: list[Any]
    timing: Timing
    extra: dict[str, Any] = field(default_factory=dict)


def _release_memory(slots: Iterable[ModelSlot]) -> None:
    """Each model's runtime arena, then glibc's free heap."""
    for slot in slots:
        try:
            slot.model.backend.release_memory()
        except Exception:  # noqa: BLE001 - memory not given back is no reason to fail the server
            log.warning("could not release the memory of %s", slot.name, exc_info=True)
    release_free_memory()


class Engine:
    def __init__(self, settings: Settings, metrics: Metrics | None = None,
                 loader: Callable[[Path, str], Backend] | None = None, lifecycle: Lifecycle | None = None):
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._loader = loader or self._load
        self.models: dict[str, ModelSlot] = {}
        self.ngram: ArpaLM | None = None  # the scorer directory's n-gram LM (serving_defaults(...).ngram), if any
        self.lifecycle = lifecycle or Lifecycle(settings.shutdown_grace_s)
        self.lifecycle.on_drain(self._log_drain)
        self.lifecycle.on_grace_over(self._end_grace)
        self.in_flight = 0
        self.batcher = Batcher(settings)  # the queues, the tokeniser thread and the worker thread
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._trim: asyncio.TimerHandle | None = None  # gives freed memory back once idle (release_free_memory)
        self.metrics.in_flight.set_function(lambda: self.in_flight)  # read when scraped, not set per request
        self.metrics.ready.set_function(lambda: self.lifecycle.ready)

    def _load(self, path: Path, backend: str) -> Backend:
        """electric.inference.backend.load_backend, with the ONNX Runtime options when the directory is an export."""
        kwargs: dict[str, Any] = {}
        if resolve_backend(path, backend) == "onnx":
            if self.settings.providers:
                kwargs["providers"] = self.settings.providers
            if self.settings.threads:
                kwargs["threads"] = self.settings.threads
            kwargs["spin"] = self.settings.spin_wait
        return load_backend(path, backend, **kwargs)

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load every model (in a thread), start its batcher, warm it up, then turn ready."""
        self._loop = asyncio.get_running_loop()
        try:
            specs: list[tuple[str, Path, tuple[str, ...]]] = []
            if self.settings.model is not None:
                scorer = model_dir_for_method(self.settings.model, "electric")
                specs.append((SCORER, scorer, SCORER_KINDS))
                defaults = serving_defaults(scorer)
                if defaults.detector is not None:  # electric adapt's energy model beside the scorer
                    specs.append((DETECTOR, defaults.detector, ("discriminator",)))
                if defaults.ngram is not None:  # electric adapt's n-gram LM: /v1/rerank's ngram weight
                    self.ngram = await self._loop.run_in_executor(None, ArpaLM.read, defaults.ngram)
                    log.info("loaded the n-gram LM %s: %s", defaults.ngram, self.ngram.describe())
            check_ngram_weight(self.settings.rerank_defaults(), self.ngram)
            specs += [(n, Path(p), ("classifier", "tagger")) for n, p in self.settings.classifiers.items()]
            for name, path, kinds in specs:
                t0 = time.perf_counter()
                backend = await self._loop.run_in_executor(self.batcher.worker, self._loader, path, self.settings.backend)
                if backend.kind not in kinds:
                    what = {SCORER: "--model", DETECTOR: "--model's detector"}.get(name, f"--classifier {name}")
                    raise ValueError(f"{what}: {str(path)!r} holds a {backend.kind} model; expected "
                                     f"{' or '.join(kinds)}")
                model = ServedModel(name, path, backend, self.settings)
                slot = ModelSlot(model, Admission(model.hidden_size, model.max_tokens, self.settings.request_timeout_s),
                                 SlotMetrics(self.metrics, name))
                slot.metrics.queued.set_function(slot.queued)
                self.models[name] = slot
                self.batcher.start(slot)
                log.info("loaded %s (%s, %s) from %s in %.1f s", name, model.kind, ",".join(backend.providers), path,
                         time.perf_counter() - t0)
                model.log_length()
                if model.kind == "discriminator":
                    log.info("%s: detect probabilities are %s", name, describe_calibration(model.calibration))
            log.info("/v1/rerank's default weights: %s", self.settings.rerank_defaults().to_dict())
            if self.settings.warmup:
                await self._warmup()
        except Exception as e:  # noqa: BLE001 - reported by /health and the process exit code
            self.lifecycle.failed_with(e)
            log.error("could not start: %s", e)
            raise
        self.lifecycle.loaded()

    async def _warmup(self) -> None:
        t0 = time.perf_counter()
        self.batcher.warming = True
        try:
            await self._warm_every_model()
        finally:
            self.batcher.warming = False
        log.info("warmed up in %.2f s", time.perf_counter() - t0)

    async def _warm_every_model(self) -> None:
        """Every route's first batches, then a batch at each length bucket up to the served length, so admission
        knows the model's pace at every length (server/admission.Pace) before the first request; then the memory
        those batches took goes back."""
        s = self.settings
        for slot in self.models.values():
            model = slot.model
            n = max(1, min(s.max_batch_size, s.max_inputs_per_request, s.max_batch_tokens // 64, 32))
            batches = [[WARMUP_TEXT[:20]], [WARMUP_TEXT] * n]
            lengths = [b for b in slot.admission.pace.lengths() if b < model.max_tokens] + [model.max_tokens]
            for length in lengths:  # length - 2 words of one piece each, + [CLS] and [SEP]
                rows = max(1, min(s.max_batch_size, s.max_inputs_per_request, s.max_batch_tokens // length,
                                  WARMUP_PACE_TOKENS // length))
                batches.append([" ".join((WARMUP_TEXT.split() * length)[:max(1, length - 2)])] * rows)
            for i, batch in enumerate(batches):
                if slot.name == DETECTOR:
                    await self.detect(batch, truncate=True, _internal=True)
                elif model.kind in SCORER_KINDS:
                    await self.score(batch, truncate=True, _internal=True)
                    if model.kind == "discriminator" and i < 2:
                        await self.detect(batch, truncate=True, _internal=True)
                else:
                    await self.classify(slot.name, texts=batch, truncate=True, _internal=True)
        assert self._loop is not None, "start() set it before warming up"
        await self._loop.run_in_executor(self.batcher.worker, _release_memory, list(self.models.values()))

    def _log_drain(self) -> None:
        log.info("shutting down: refusing new requests, finishing %d in flight and the ones received",
                 self.in_flight)

    def _end_grace(self) -> None:
        """The drain's grace is over: answer every request still in flight with ShuttingDown."""
        cut = self.batcher.unanswered()
        if cut:
            log.warning("shutdown grace of %g s is over: failing %d requests still in flight",
                        self.settings.shutdown_grace_s, len(cut))
        for r in cut:
            r.future.set_exception(ShuttingDown.after_grace(self.settings.shutdown_grace_s))

    async def close(self, timeout: float | None = None) -> None:
        """Drain: wait (up to `timeout`) for admitted requests to finish, then stop the batchers and threads."""
        self.lifecycle.begin_drain()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
        await self.batcher.stop(self.models.values())
        self.lifecycle.stopped()

    # ---- admission and validation ----------------------------------------------------------------

    @contextlib.contextmanager
    def _admitted(self, internal: bool = False, before_shutdown: bool = False):
        if not internal:
            self.lifecycle.admit(before_shutdown)
            if self.in_flight >= self.settings.max_concurrent_requests:
                wait = self._place_frees_s()
                raise Overloaded(f"{self.in_flight} requests in flight, the limit is "
                                 f"{self.settings.max_concurrent_requests}; retry in ~{wait:.1f} s", wait)
        self.in_flight += 1
        self._idle.clear()
        if self._trim is not None:
            self._trim.cancel()
            self._trim = None
        try:
            yield
        finally:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._idle.set()
                if self._loop is not None and not self._loop.is_closed():
                    self._trim = self._loop.call_later(IDLE_TRIM_S, self._release_memory)

    def _place_frees_s(self) -> float | None:
        """Seconds until a request in flight should be done (the soonest of the models' admission estimates,
        Admission.first_done_s; at least admission.MIN_RETRY_S), None when none is timed."""
        done = [d for d in (slot.admission.first_done_s() for slot in self.models.values()) if d is not None]
        return max(MIN_RETRY_S, min(done)) if done else None

    def _release_memory(self) -> None:
        """Idle for IDLE_TRIM_S: give the memory a burst left behind back to the kernel - each runtime's arena, then
        the heap - in the inference thread, so no batch runs beside it."""
        self._trim = None
        assert self._loop is not None, "_admitted() scheduled this on it"
        with contextlib.suppress(RuntimeError):  # the thread pool is already shut down
            self._loop.run_in_executor(self.batcher.worker, _release_memory, list(self.models.values()))

    def refuse_big_body(self, length: int) -> Overloaded | None:
        """Overloaded for a request of `length` bytes (over admission.BIG_BODY_BYTES) to the scorer while the
        scorer's admitted work alone is past the deadline (admission.check_backlog); else None. HTTP asks before it
        reads the body."""
        slot = self.models.get(SCORER)
        if length < BIG_BODY_BYTES or slot is None or not self.lifecycle.ready:
            return None
        return slot.admission.refuse_big_body()

    def _slot(self, name: str | None, kinds: tuple[str, ...]) -> ModelSlot:
        if name is None:  # the scorer
            slot = self.models.get(SCORER)
            if slot is None:
                raise ValidationError("this server has no scoring model (start it with --model DIR)")
            return slot
        classifiers = [n for n, s in self.models.items() if s.model.kind in kinds]
        if not name:
            if len(classifiers) == 1:
                return self.models[classifiers[0]]
            raise ValidationError(f"say which classifier with \"model\": one of {classifiers}" if classifiers
                                  else "this server has no classifier (start it with --classifier NAME=DIR)")
        if name not in classifiers:
            raise ValidationError(f"unknown classifier {name!r}; this server has {classifiers or 'none'}")
        return self.models[name]

    def _check_count(self, n: int, what: str) -> None:
        """No inputs, or more than max_inputs_per_request (the transports counted the request's lists already,
        before looking at any element: server/intake.py)."""
        if n == 0:
            raise ValidationError(f"no {what} given")
        check_count(n, what, self.settings.max_inputs_per_request)

    def _check_text(self, text: object, name: str) -> None:
        if not isinstance(text, str):
            raise ValidationError(f"{name} is a {type(text).__name__}, expected a string")
        if not text.strip():
            raise ValidationError(f"{name} is empty")
        if len(text) > self.settings.max_input_chars:
            raise ValidationError(f"{name} has {len(text)} characters, more than the limit of "
                                  f"{self.settings.max_input_chars} (max_input_chars), even with truncate")

    # ---- the four calls ----------------------------------------------------------------------------

    # `before_shutdown` on each: the transport received the request before the drain began (Lifecycle.admit)

    async def score(self, texts: Sequence[str], *, per_token: bool = False, truncate: bool = False,
                    ngram: bool = False, before_shutdown: bool = False, _internal: bool = False) -> Answer:
        """The served method's score of each text (electric.inference.scoring.score_row: the Electric PLL of a
        discriminator, the cloze score of a cloze model); with `ngram`, the n-gram LM's too (TextScore.ngram)."""
        with self._admitted(_internal, before_shutdown):
            slot = self._slot(None, SCORER_KINDS)
            assert slot.model.method is not None, "a scorer's kind is one of METHODS_OF_KIND"
            texts = self._texts(texts, "texts")
            if ngram and self.ngram is None:
                raise ValidationError("ngram: this server's model carries no n-gram LM (a model directory made by "
                                      "`electric adapt` does)")
            timing = Timing()
            results = await self._submit(slot, texts, truncate, _input_name,
                                         pipelines.post_score(slot.model.method, per_token), timing)
            if ngram:
                for r, x in zip(results, await self._ngram_scores(texts), strict=True):
                    r.ngram = x
            return Answer(slot.name, results, timing)

    async def detect(self, texts: Sequence[str], *, truncate: bool = False, before_shutdown: bool = False,
                     _internal: bool = False) -> Answer:
        """ELECTRA replaced-token probabilities (electric.inference.scoring.electra_detect)."""
        with self._admitted(_internal, before_shutdown):
            slot = self.models.get(DETECTOR) or self._slot(None, ("discriminator",))
            model = slot.model
            if model.kind != "discriminator":
                raise ValidationError(f"this server's model is a {model.kind} model ({model.method} scores: "
                                      "/v1/score, /v1/rerank); replaced-token detection needs a discriminator")
            texts = self._texts(texts, "texts")
            timing = Timing()
            results = await self._submit(slot, texts, truncate, _input_name, pipelines.post_detect(model.calibration),
                                         timing)
            return Answer(slot.name, results, timing)

    async def rerank(self, lists: Sequence[tuple[str | None, Sequence[str], Sequence[float] | None]], *,
                     weights: Mapping[str, Any] | None = None, truncate: bool = False,
                     before_shutdown: bool = False) -> Answer:
        """Score every hypothesis of every list (id, hypotheses, first-pass scores or None) in one submission,
        then reorder them as `electric rerank` does (electric.evaluation.nbest.ScoredLists.rerank).
        `weights`: the request's own weights (the keys of `Weights`: lm, length, beta, prior, piece, lm_score);
        the others are the server's defaults."""
        with self._admitted(before_shutdown=before_shutdown):
            slot = self._slot(None, SCORER_KINDS)
            assert slot.model.method is not None, "a scorer's kind is one of METHODS_OF_KIND"
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
            applied = self._rerank_weights(weights or {})
            check_ngram_weight(applied, self.ngram, request=True)
            timing = Timing()
            flat_scores = await self._submit(slot, flat, truncate,
                                             lambda k: "lists[{}].hypotheses[{}]".format(*where[k]),
                                             pipelines.post_score(slot.model.method, False), timing)
            per_list, at = [], 0
            for nb in nbests:
                per_list.append(flat_scores[at: at + len(nb.hyps)])
                at += len(nb.hyps)
            scored = ScoredLists.from_scores(nbests, per_list)
            if applied.ngram:
                assert self.ngram is not None, "check_ngram_weight refused an n-gram weight without the LM"
                sums, at, per_list_ngram = await self._ngram_scores(flat), 0, []
                for nb in nbests:
                    per_list_ngram.append(np.array(sums[at: at + len(nb.hyps)]))
                    at += len(nb.hyps)
                scored = dataclasses.replace(scored, ngram=per_list_ngram)
            return Answer(slot.name, scored.rerank(applied), timing, {"weights": applied.to_dict()})

    async def _ngram_scores(self, texts: list[str]) -> list[float]:
        """The n-gram LM's ln P of each text; off the loop when there are many (about 40 us a short text)."""
        assert self.ngram is not None
        if len(texts) <= NGRAM_INLINE:
            return [self.ngram.score(t).score for t in texts]
        lm = self.ngram
        return await asyncio.get_running_loop().run_in_executor(None, lambda: [lm.score(t).score for t in texts])

    def _rerank_weights(self, given: Mapping[str, Any]) -> Weights:
        """The server's default weights with a request's own (`given`) over them, each checked and named."""
        for name in ("lm", "length", "beta", "piece", "ngram"):
            if given.get(name) is not None:
                _check_range(given[name], MAX_ABS_RERANK_WEIGHT, f"weights.{name}")
        for name, choices in (("prior", PRIORS), ("lm_score", LM_SCORES)):
            if given.get(name) is not None and given[name] not in choices:
                raise ValidationError(f"weights.{name} must be one of {', '.join(choices)}, got {given[name]!r}")
        return dataclasses.replace(self.settings.rerank_defaults(),
                                   **{k: v for k, v in given.items() if v is not None})

    async def classify(self, model: str | None, *, texts: Sequence[str] | None = None,
                       pairs: Sequence[tuple[str, str]] | None = None, truncate: bool = False,
                       before_shutdown: bool = False, _internal: bool = False) -> Answer:
        """Label probabilities (or a regression value, or per-token labels) from the classifier `model`."""
        with self._admitted(_internal, before_shutdown):
            slot = self._slot(model or "", ("classifier", "tagger"))
            m = slot.model
            if (texts is None) == (pairs is None) or (texts is not None and pairs is not None):
                raise ValidationError("give either \"texts\" or \"pairs\"")
            timing = Timing()
            inputs: list[str] | list[tuple[str, ...]]
            if texts is not None:
                post = (pipelines.post_tags(m.labels) if m.kind == "tagger" else
                        pipelines.post_classify(m.labels, m.regression))
                inputs, names = self._texts(texts, "texts"), _input_name
            else:
                assert pairs is not None, "texts or pairs, not both (checked above)"
                if m.kind == "tagger":
                    raise ValidationError(f"classifier {slot.name!r} tags tokens of single texts; send \"texts\"")
                self._check_count(len(pairs), "pairs")
                for i, p in enumerate(pairs):
                    if not isinstance(p, (list, tuple)) or len(p) != 2:
                        raise ValidationError(f"pairs[{i}] is not a pair of two texts")
                    self._check_text(p[0], f"pairs[{i}][0]")
                    self._check_text(p[1], f"pairs[{i}][1]")
                inputs, names = [tuple(p) for p in pairs], lambda i: f"pairs[{i}]"
                post = pipelines.post_classify(m.labels, m.regression)
            results = await self._submit(slot, inputs, truncate, names, post, timing)
            return Answer(slot.name, results, timing)

    def _texts(self, texts: Sequence[str], what: str) -> list[str]:
        texts = list(texts)
        self._check_count(len(texts), what)
        for i, t in enumerate(texts):
            self._check_text(t, f"input {i}")
        return texts

    async def _submit(self, slot: ModelSlot, inputs: list, truncate: bool, names: Callable[[int], str],
                      post: pipelines.Post, timing: Timing) -> list[Any]:
        """Hand one request's validated inputs to the batcher (which admits them by their work) and wait for their
        results."""
        if self.lifecycle.grace_over:
            raise ShuttingDown.after_grace(self.settings.shutdown_grace_s)
        return await self.batcher.submit(slot, inputs, truncate, names, post, timing)

    def info(self) -> dict:
        s = self.settings
        return {"version": __version__, "ready": self.lifecycle.ready,
                "models": [m.model.info() for m in self.models.values()],
                "limits": {"max_inputs_per_request": s.max_inputs_per_request,
                           "max_tokens_per_input": min((m.model.max_tokens for m in self.models.values()),
                                                       default=s.max_tokens_per_input),
                           "max_input_chars": s.max_input_chars,
                           "max_batch_tokens": s.max_batch_tokens, "max_batch_size": s.max_batch_size,
                           "max_concurrent_requests": s.max_concurrent_requests, "max_body_bytes": s.max_body_bytes,
                           "max_wait_ms": s.max_wait_ms, "request_timeout_s": s.request_timeout_s},
                "rerank_defaults": s.rerank_defaults().to_dict(),
                "rerank_parts": rerank_parts(s.rerank_defaults()),
                "ngram": None if self.ngram is None else self.ngram.describe()}


def rerank_parts(w: Weights) -> list[str]:
    """The parts of the combination `w` applies: first_pass (always: a list's own scores, or its rank prior), model,
    ngram, word_bonus, piece_bonus."""
    return ["first_pass", *(name for name, on in (("model", w.lm), ("ngram", w.ngram), ("word_bonus", w.length),
                                                  ("piece_bonus", w.piece)) if on)]


def check_ngram_weight(w: Weights, ngram: ArpaLM | None, request: bool = False) -> None:
    """An n-gram weight needs the n-gram LM: a ValidationError for a request's weights, a ValueError at start."""
    if w.ngram and ngram is None:
        why = (f"an n-gram weight ({w.ngram:g}) needs an n-gram LM, and this server's model carries none (a model "
               "directory made by `electric adapt` does)")
        if request:
            raise ValidationError(f"weights.ngram: {why}")
        raise ValueError(f"ngram_weight: {why}")


def _check_range(x: float, limit: float, name: str) -> None:
    """A rerank number within [-limit, limit] (settings.MAX_ABS_RERANK_*: totals cannot overflow), else a
    ValidationError naming it."""
    if not -limit <= x <= limit:
        raise ValidationError(f"{name}: should be between {-limit:g} and {limit:g}, got {x!r}")


def _input_name(i: int) -> str:
    return f"input {i}"
