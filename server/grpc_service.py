"""gRPC transport (grpc.aio, same event loop as HTTP): converts protobuf to engine calls and back.

Errors are mapped here, once: the core's `ServerError` types -> a status code by `GRPC_STATUS`, with the
message as details and the `error-type` trailing metadata; anything unexpected -> INTERNAL without a traceback. A request that is
not a valid protobuf message of its type, or has a NaN or infinite number in any float field, is
INVALID_ARGUMENT. Engine timing goes back as trailing metadata (`x-queue-time`, `x-inference-time`, ...
in ms), as the HTTP headers do. Every call is counted and logged once, failures included.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection
from pydantic import SecretStr

from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from server.engine import Answer, Engine
from server.errors import (
    BackendError,
    NotReady,
    Overloaded,
    ServerError,
    Timeout,
    Unauthorized,
    ValidationError,
)
from server.intake import GRPC_KEY, check_counts, require_key
from server.settings import Settings
from server.transport import record, status_for, timing_metadata

log = logging.getLogger("electric.server")

SERVICES = tuple(pb.DESCRIPTOR.services_by_name[n].full_name for n in ("Scoring", "Detection", "Classification",
                                                                       "Info"))
OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")  # no API key needed

# the core's errors -> gRPC status (a subclass not listed takes its nearest listed base's: PayloadTooLarge ->
# INVALID_ARGUMENT, ShuttingDown -> UNAVAILABLE)
GRPC_STATUS: dict[type[ServerError], grpc.StatusCode] = {
    ServerError: grpc.StatusCode.INTERNAL,
    ValidationError: grpc.StatusCode.INVALID_ARGUMENT,
    Unauthorized: grpc.StatusCode.UNAUTHENTICATED,
    Overloaded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    NotReady: grpc.StatusCode.UNAVAILABLE,
    Timeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    BackendError: grpc.StatusCode.INTERNAL,
}


async def _abort(context: grpc.aio.ServicerContext, err: ServerError) -> None:
    """`err` as gRPC answers it: its code by GRPC_STATUS, the message as details, `error-type`, and for a refusal
    for now (RESOURCE_EXHAUSTED, UNAVAILABLE) `grpc-retry-pushback-ms`, when to try again (gRPC's own retry key)."""
    metadata: tuple[tuple[str, str], ...] = (("error-type", err.error_type),)
    if err.retry_after_s is not None:
        metadata += (("grpc-retry-pushback-ms", str(max(1, round(err.retry_after_s * 1e3)))),)
    await context.abort(status_for(GRPC_STATUS, err), err.message, trailing_metadata=metadata)


def _repeated(msg, name: str):
    """A message's repeated field `name`, or None (intake.check_counts' accessor)."""
    return getattr(msg, name) if name in msg.DESCRIPTOR.fields_by_name else None


def _non_finite(msg, path: str = "") -> str | None:
    """`where: ...` for the first float field of `msg` (nested messages included) that is NaN or infinite."""
    for fd, value in msg.ListFields():
        if fd.type not in (fd.TYPE_MESSAGE, fd.TYPE_DOUBLE, fd.TYPE_FLOAT):
            continue
        if fd.type != fd.TYPE_MESSAGE and fd.is_repeated and all(map(math.isfinite, value)):
            continue
        name = f"{path}.{fd.name}" if path else fd.name
        for k, x in enumerate(value) if fd.is_repeated else ((None, value),):
            where = name if k is None else f"{name}[{k}]"
            if fd.type == fd.TYPE_MESSAGE:
                bad = _non_finite(x, where)
                if bad:
                    return bad
            elif fd.type in (fd.TYPE_DOUBLE, fd.TYPE_FLOAT) and not math.isfinite(x):
                return f"{where}: should be a finite number, got {x}"
    return None


@functools.cache
def _has_floats(descriptor) -> bool:
    """Whether messages of this type can hold a float anywhere (nested messages included): only those are walked by
    `_non_finite` (a ScoreRequest, texts and flags, is not)."""
    return any(fd.type in (fd.TYPE_DOUBLE, fd.TYPE_FLOAT)
               or (fd.type == fd.TYPE_MESSAGE and fd.message_type is not descriptor and _has_floats(fd.message_type))
               for fd in descriptor.fields)


def rpc(route: str):
    """Wrap a servicer method returning (Answer | None, response): the input count, then validation of float
    fields, error mapping, metrics, access log."""

    def deco(fn):
        @functools.wraps(fn)
        async def wrapper(self, request, context: grpc.aio.ServicerContext):
            t0 = time.perf_counter()
            status, error_type, timing = "OK", None, None
            try:
                check_counts(request, self.settings.max_inputs_per_request, _repeated)
                bad = _non_finite(request) if _has_floats(request.DESCRIPTOR) else None
                if bad:
                    raise ValidationError(bad)
                answer, response = await fn(self, request, context)
                if answer is not None:
                    timing = answer.timing
                    context.set_trailing_metadata(timing_metadata(answer.timing)
                                                  + (("x-total-time", f"{(time.perf_counter() - t0) * 1e3:.3f}"),))
                return response
            except asyncio.CancelledError:  # the client went away, or grpc cut the call FLUSH_S after the grace
                status, error_type = ("UNAVAILABLE", "shutting_down") if self.engine.lifecycle.grace_over else \
                    ("CANCELLED", "client_closed")
                raise
            except Exception as e:  # noqa: BLE001 - typed errors as they are, anything else without a traceback
                if isinstance(e, grpc.aio.AbortError):
                    raise
                err = e if isinstance(e, ServerError) else None
                if err is None:
                    log.error("unexpected error on %s: %s", route, e, exc_info=e)
                    err = BackendError(f"internal error ({type(e).__name__})")
                status, error_type = status_for(GRPC_STATUS, err).name, err.error_type
                await _abort(context, err)
            finally:
                record(self.metrics, self.settings, "grpc", route, status, error_type, time.perf_counter() - t0,
                       timing, context.peer() if self.settings.access_log else "")

        return wrapper

    return deco


class _Base:
    SERVICE: str  # its service's name in electric.proto

    def __init__(self, engine: Engine):
        self.engine, self.metrics, self.settings = engine, engine.metrics, engine.settings


# ---- conversions -----------------------------------------------------------------------------------

def _text_score(r) -> pb.TextScore:
    msg = pb.TextScore(text=r.text, score=r.score, mean=r.mean, num_tokens=r.num_tokens, method=r.method,
                       truncated=r.truncated, ngram=r.ngram)
    if r.tokens:
        msg.tokens.extend(pb.TokenScore(token=t.token, start=t.start, end=t.end, score=t.score) for t in r.tokens)
    return msg


def _detection(d, totals_only: bool) -> pb.TextDetection:
    msg = pb.TextDetection(text=d.text, score=d.score, mean=d.mean, num_tokens=d.num_tokens, truncated=d.truncated)
    if not totals_only:
        msg.tokens.extend(pb.TokenDetection(token=t.token, start=t.start, end=t.end, prob=t.prob, logit=t.logit)
                          for t in d.tokens)
        msg.words.extend(pb.WordDetection(word=w.word, start=w.start, end=w.end, max_prob=w.max_prob,
                                          mean_prob=w.mean_prob, num_pieces=w.num_pieces) for w in d.words)
    return msg


def _token_labels(xs) -> list[pb.TokenLabel]:
    return [pb.TokenLabel(token=x.token, start=x.start, end=x.end, label=x.label, probability=x.probability)
            for x in xs or ()]


def _classification(c) -> pb.TextClassification:
    msg = pb.TextClassification(truncated=c.truncated)
    if c.label is not None:
        msg.label = c.label
    if c.value is not None:
        msg.value = c.value
    msg.probabilities.extend(pb.LabelProbability(label=k, probability=v) for k, v in c.probabilities.items())
    msg.tokens.extend(_token_labels(c.tokens))
    msg.words.extend(_token_labels(c.words))
    return msg


# ---- services --------------------------------------------------------------------------------------

class ScoringService(_Base, pb_grpc.ScoringServicer):
    SERVICE = "Scoring"

    @rpc("/electric.v1.Scoring/Score")
    async def Score(self, request: pb.ScoreRequest, context) -> tuple[Answer, pb.ScoreResponse]:
        a = await self.engine.score(list(request.texts), per_token=request.per_token, truncate=request.truncate,
                                    ngram=request.ngram, before_shutdown=True)
        return a, pb.ScoreResponse(model=a.model, results=[_text_score(r) for r in a.results])

    @rpc("/electric.v1.Scoring/Rerank")
    async def Rerank(self, request: pb.RerankRequest, context) -> tuple[Answer, pb.RerankResponse]:
        w = request.weights
        lists = [(x.id or None, list(x.hypotheses), list(x.scores) if len(x.scores) else None) for x in request.lists]
        weights = {f.name: getattr(w, f.name) for f in w.DESCRIPTOR.fields if w.HasField(f.name)}
        a = await self.engine.rerank(lists, weights=weights, truncate=request.truncate, before_shutdown=True)
        results = [pb.RerankResult(utt_id=r.utt_id, best=r.hyps[0], order=r.order, tied=r.tied, hyps=[
            pb.RankedHypothesis(text=h, rank=k, total=t, prior=p, lm=s, words=n, pieces=m, ngram=g)
            for h, k, t, p, s, n, m, g in zip(r.hyps, r.order, r.total, r.prior, r.lm, r.words, r.pieces,
                                              r.ngram or [None] * len(r.hyps), strict=True)])
            for r in a.results]
        return a, pb.RerankResponse(model=a.model, results=results, weights=pb.RerankWeights(**a.extra["weights"]))


class DetectionService(_Base, pb_grpc.DetectionServicer):
    SERVICE = "Detection"

    @rpc("/electric.v1.Detection/Detect")
    async def Detect(self, request: pb.DetectRequest, context) -> tuple[Answer, pb.DetectResponse]:
        a = await self.engine.detect(list(request.texts), truncate=request.truncate, before_shutdown=True)
        return a, pb.DetectResponse(model=a.model, results=[_detection(d, request.totals_only) for d in a.results])


class ClassificationService(_Base, pb_grpc.ClassificationServicer):
    SERVICE = "Classification"

    @rpc("/electric.v1.Classification/Classify")
    async def Classify(self, request: pb.ClassifyRequest, context) -> tuple[Answer, pb.ClassifyResponse]:
        texts = list(request.texts) if len(request.texts) else None
        pairs = [(p.text, p.text_pair) for p in request.pairs] if len(request.pairs) else None
        if texts is None and pairs is None:
            texts = []  # the engine says "no texts given"
        a = await self.engine.classify(request.model, texts=texts, pairs=pairs, truncate=request.truncate,
                                       before_shutdown=True)
        return a, pb.ClassifyResponse(model=a.model, results=[_classification(c) for c in a.results])


class InfoService(_Base, pb_grpc.InfoServicer):
    SERVICE = "Info"

    @rpc("/electric.v1.Info/GetInfo")
    async def GetInfo(self, request: pb.InfoRequest, context) -> tuple[None, pb.InfoResponse]:
        i = self.engine.info()
        return None, pb.InfoResponse(version=i["version"], ready=i["ready"],
                                     models=[pb.ModelInfo(**m) for m in i["models"]], limits=pb.Limits(**i["limits"]),
                                     rerank_defaults=pb.RerankWeights(**i["rerank_defaults"]),
                                     rerank_parts=i["rerank_parts"], ngram=i["ngram"] or "")


async def _refuse(context: grpc.aio.ServicerContext, err: ServerError, route: str, engine: Engine, t0: float) -> None:
    """Answer `err` from an interceptor, counted and logged like any call."""
    try:
        await _abort(context, err)
    finally:
        record(engine.metrics, engine.settings, "grpc", route, status_for(GRPC_STATUS, err).name, err.error_type,
               time.perf_counter() - t0, client=context.peer())


class _Undecodable:
    """What a request that is not a valid message of its type parses to; its handler answers INVALID_ARGUMENT."""

    __slots__ = ("error",)

    def __init__(self, error: ValidationError):
        self.error = error


def _tolerant(parse: Callable[[bytes], object]) -> Callable[[bytes], object]:
    def tolerant_parse(data: bytes) -> object:
        try:
            return parse(data)
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, or anything a parser raises
            return _Undecodable(ValidationError(f"the request could not be decoded: {e}"))

    return tolerant_parse


def _guarded(behaviour, method: str, engine: Engine):
    """`behaviour` (a servicer method), unless its request could not be decoded: then INVALID_ARGUMENT."""

    async def guarded(request, context):
        if isinstance(request, _Undecodable):
            return await _refuse(context, request.error, method, engine, time.perf_counter())
        return await behaviour(request, context)

    return guarded


def add_service(server: grpc.aio.Server, engine: Engine, servicer: object, service, messages) -> None:
    """Register `servicer`'s methods of `service` (a ServiceDescriptor; its request and response classes in the
    `messages` module), as grpc's generated add_*Servicer_to_server does, but with unary requests that are not a valid
    message of their type (not protobuf, a string field that is not UTF-8) answered INVALID_ARGUMENT with a plain
    message instead of grpc's UNKNOWN naming a Python exception. Done once here rather than by an interceptor, which
    would run on every call."""
    handlers = {}
    for m in service.methods:
        request, response = getattr(messages, m.input_type.name), getattr(messages, m.output_type.name)
        behaviour = getattr(servicer, m.name)
        if m.server_streaming:  # health's Watch: as grpc registers it
            handlers[m.name] = grpc.unary_stream_rpc_method_handler(
                behaviour, request_deserializer=request.FromString, response_serializer=response.SerializeToString)
        else:
            handlers[m.name] = grpc.unary_unary_rpc_method_handler(
                _guarded(behaviour, f"/{service.full_name}/{m.name}", engine),
                request_deserializer=_tolerant(request.FromString), response_serializer=response.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
    server.add_registered_method_handlers(service.full_name, handlers)


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    """Require `authorization: Bearer KEY` metadata, except on health checks and reflection."""

    def __init__(self, key: SecretStr, engine: Engine):
        self._key = key
        self._engine = engine

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        t0 = time.perf_counter()
        handler = await continuation(details)
        if handler is None or details.method.startswith(OPEN_METHOD_PREFIXES):
            return handler  # None: grpc answers UNIMPLEMENTED
        given = next((v for k, v in details.invocation_metadata or () if k == "authorization"), "")
        try:
            require_key(self._key, given if isinstance(given, str) else given.decode(), GRPC_KEY)
        except Unauthorized as e:
            return self._deny(e, details.method, t0)
        return handler

    def _deny(self, err: Unauthorized, method: str, t0: float):
        """A handler that answers `err` (UNAUTHENTICATED) instead of the method's."""

        async def deny(request, context):
            await _refuse(context, err, method, self._engine, t0)

        return grpc.unary_unary_rpc_method_handler(deny)


class GrpcServer:
    """The grpc.aio server with our services, health and reflection; started inside the running loop."""

    def __init__(self, engine: Engine, settings: Settings):
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if settings.api_key is not None:
            interceptors.append(ApiKeyInterceptor(settings.api_key, engine))
        self.server = grpc.aio.server(interceptors=interceptors, options=[
            ("grpc.max_receive_message_length", settings.max_body_bytes),
            ("grpc.so_reuseport", 0),
        ])
        for servicer in (ScoringService(engine), DetectionService(engine), ClassificationService(engine),
                         InfoService(engine)):
            add_service(self.server, engine, servicer, pb.DESCRIPTOR.services_by_name[servicer.SERVICE], pb)
        self.health = health.aio.HealthServicer()
        add_service(self.server, engine, self.health, health_pb2.DESCRIPTOR.services_by_name["Health"], health_pb2)
        reflection.enable_server_reflection(SERVICES + (health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        self.host, self.settings = settings.host, settings
        self._stopping: asyncio.Future | None = None  # begin_stop's
        self.port = self.server.add_insecure_port(f"{_host(settings.host)}:{settings.grpc_port}")
        if self.port == 0:
            raise OSError(f"could not bind the gRPC port {settings.host}:{settings.grpc_port}")

    async def start(self) -> None:
        await self.set_serving(False)
        await self.server.start()
        log.info("gRPC listening on %s:%d", self.host, self.port)

    async def set_serving(self, serving: bool) -> None:
        """The server ("") and each service SERVING or NOT_SERVING; a service without its model (Scoring and
        Detection without --model, Classification without --classifier) stays NOT_SERVING."""
        serving_status, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("",) + SERVICES:
            await self.health.set(name, serving_status if serving and self._has_model(name) else not_serving)

    def _has_model(self, service: str) -> bool:
        short = service.rpartition(".")[2]
        if short in ("Scoring", "Detection"):
            return self.settings.model is not None
        if short == "Classification":
            return bool(self.settings.classifiers)
        return True  # the server itself, Info

    def begin_stop(self, grace: float) -> None:
        """Refuse new RPCs from now on (grpc answers UNAVAILABLE); the calls it had let through finish within
        `grace` seconds. At the shutdown's first moment (server/app.py), so every call a handler sees was received
        before it: the handlers pass `before_shutdown=True` to the engine. Once; `stop` waits for it."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop(grace))

    async def _stop(self, grace: float) -> None:
        health = asyncio.ensure_future(self.health.enter_graceful_shutdown())  # watchers hear NOT_SERVING
        await self.server.stop(grace)  # its first step, at once, refuses new calls
        await health

    async def stop(self, grace: float) -> None:
        """begin_stop, and wait until every call it let through has finished (up to its grace)."""
        self.begin_stop(grace)
        assert self._stopping is not None, "begin_stop set it"
        await self._stopping


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
