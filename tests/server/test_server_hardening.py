"""Issue 12, server side: client input that used to crash a handler (lone surrogates, NaN/inf numbers,
undecodable gRPC messages) is a typed 422 / INVALID_ARGUMENT naming the field; unexpected failures are
logged and counted like any other response; requests still running when the shutdown grace is over get
503 `shutting_down` / UNAVAILABLE; the documented contract (open routes, 400, 405 Allow, minItems,
examples) matches the code.

The models are conftest's random tiny ones (torch backend); servers run in a thread (BackgroundServer);
`http` and `channel` are clients of the module's `server`, as in test_server_api.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path

import grpc
import httpx
import pytest
from conftest import save_random_electra

from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from server.app import BackgroundServer
from server.http import ROUTES
from server.settings import OPEN_HTTP_PATHS, Settings
from tests.server.helpers import GRPC_AUTH, KEY, controlled_loader, failures, wait_until

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def classifier_dir(tokenizer_dir, tmp_path_factory) -> Path:
    return save_random_electra("ElectraForSequenceClassification", tokenizer_dir,
                               tmp_path_factory.mktemp("hardening") / "cls")


@pytest.fixture(scope="module")
def server(disc_dir, classifier_dir):
    s = Settings(model=disc_dir, classifiers={"cls": classifier_dir}, http_port=0, grpc_port=0, api_key=KEY,
                 threads=1, warmup=False, access_log=True)
    with BackgroundServer(s) as srv:
        yield srv


def eventually(read, expected, timeout: float = 10.0):
    """`read()` once it equals `expected`: a response is logged and counted just after it is sent."""
    deadline = time.monotonic() + timeout
    while (got := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return got


@pytest.fixture
def access(caplog):
    """The parsed `electric.access` lines logged during the test."""
    caplog.set_level(logging.INFO, logger="electric.access")
    return lambda: [json.loads(r.getMessage()) for r in caplog.records if r.name == "electric.access"]


def post_raw(http: httpx.Client, route: str, body: str) -> httpx.Response:
    """POST a JSON text as it is (json= would refuse lone surrogates and NaN)."""
    return http.post(route, content=body.encode(), headers={"content-type": "application/json"})


# ---- item 2: client input that crashed a handler -------------------------------------------------------------

SURROGATES = [  # route, JSON body with a lone surrogate escape, the field the error must name
    ("/v1/score", r'{"texts": ["fine", "bad \ud800 text"]}', "texts[1]"),
    ("/v1/detect", r'{"texts": ["\udc00"]}', "texts[0]"),
    ("/v1/rerank", r'{"hypotheses": ["a", "b\ud800"]}', "hypotheses[1]"),
    ("/v1/rerank", r'{"lists": [{"id": "u\ud800", "hypotheses": ["a"]}]}', "lists[0].id"),
    ("/v1/rerank", r'{"lists": [{"hypotheses": ["a"]}, {"hypotheses": ["b", "\ud800"]}]}',
     "lists[1].hypotheses[1]"),
    ("/v1/classify", r'{"model": "cls", "texts": ["\ud800"]}', "texts[0]"),
    ("/v1/classify", r'{"model": "cls", "pairs": [["a", "b\udfff"]]}', "pairs[0][1]"),
    ("/v1/classify", r'{"model": "c\ud800", "texts": ["a"]}', "model"),
]


@pytest.mark.parametrize("route, body, field", SURROGATES, ids=[f"{r}-{f}" for r, _, f in SURROGATES])
def test_a_lone_surrogate_is_422_naming_the_field(http, route, body, field):
    r = post_raw(http, route, body)
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["error_type"] == "validation_error"
    assert err["error"].startswith(f"{field}: ") and "surrogate" in err["error"]


NON_FINITE = [  # every float field of every HTTP request, with NaN, an overflow and an infinity
    ('{"hypotheses": ["a", "b"], "weights": {"lm": NaN}}', "weights.lm"),
    ('{"hypotheses": ["a", "b"], "weights": {"lm": 1e400}}', "weights.lm"),
    ('{"hypotheses": ["a", "b"], "weights": {"length": -Infinity}}', "weights.length"),
    ('{"hypotheses": ["a", "b"], "weights": {"beta": Infinity}}', "weights.beta"),
    ('{"hypotheses": ["a", "b"], "scores": [-1.0, NaN]}', "scores[1]"),
    ('{"lists": [{"hypotheses": ["a", "b"], "scores": [1e400, 0]}]}', "lists[0].scores[0]"),
]


@pytest.mark.parametrize("body, field", NON_FINITE, ids=[f"{f}-{i}" for i, (_, f) in enumerate(NON_FINITE)])
def test_a_non_finite_number_is_422_naming_the_field(http, body, field):
    r = post_raw(http, "/v1/rerank", body)
    assert r.status_code == 422, r.text
    assert r.json() == {"error": f"{field}: Input should be a finite number", "error_type": "validation_error"}


@pytest.mark.parametrize("request_, field", [
    (pb.RerankRequest(lists=[pb.NBestList(hypotheses=["a", "b"])], weights=pb.RerankWeights(lm=float("nan"))),
     "weights.lm"),
    (pb.RerankRequest(lists=[pb.NBestList(hypotheses=["a", "b"])], weights=pb.RerankWeights(length=float("inf"))),
     "weights.length"),
    (pb.RerankRequest(lists=[pb.NBestList(hypotheses=["a", "b"])], weights=pb.RerankWeights(beta=-float("inf"))),
     "weights.beta"),
    (pb.RerankRequest(lists=[pb.NBestList(hypotheses=["a"]), pb.NBestList(hypotheses=["a", "b"],
                                                                          scores=[0.0, float("nan")])]),
     "lists[1].scores[1]"),
])
def test_grpc_rejects_non_finite_numbers(channel, request_, field):
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.ScoringStub(channel).Rerank(request_, metadata=GRPC_AUTH)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(f"{field}: should be a finite number")
    assert dict(e.value.trailing_metadata())["error-type"] == "validation_error"


# ---- item 3: undecodable gRPC messages -----------------------------------------------------------------------

NOT_UTF8 = b"\x0a\x03a\xff\xfe"  # ScoreRequest.texts = [b"a\xff\xfe"]: a string field that is not UTF-8
NOT_PROTOBUF = b"\xff\xff\xff\xff\xff"


@pytest.mark.parametrize("method", ["/electric.v1.Scoring/Score", "/electric.v1.Scoring/Rerank",
                                    "/electric.v1.Detection/Detect", "/electric.v1.Classification/Classify",
                                    "/grpc.health.v1.Health/Check"])
@pytest.mark.parametrize("payload", [NOT_UTF8, NOT_PROTOBUF], ids=["not-utf8", "not-protobuf"])
def test_undecodable_grpc_messages_are_invalid_argument(server, channel, access, method, payload):
    call = channel.unary_unary(method)  # no serializer: the bytes go out as they are
    with pytest.raises(grpc.RpcError) as e:
        call(payload, metadata=GRPC_AUTH)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert e.value.details().startswith("the request could not be decoded")
    assert "<class" not in e.value.details() and "DecodeError" not in e.value.details()
    assert dict(e.value.trailing_metadata())["error-type"] == "validation_error"
    # only this method's lines: the previous test's last access line can land after its response was read
    mine = lambda: [(x["route"], x["status"]) for x in access() if x["route"] == method]  # noqa: E731
    assert eventually(mine, [(method, "INVALID_ARGUMENT")]) == [(method, "INVALID_ARGUMENT")]


def test_a_valid_message_still_passes_the_decode_guard(channel):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    assert pb_grpc.ScoringStub(channel).Score(pb.ScoreRequest(texts=["a"]), metadata=GRPC_AUTH).results[0].text == "a"
    assert health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest()).status == \
        health_pb2.HealthCheckResponse.SERVING


# ---- item 4: every response is logged and counted ------------------------------------------------------------

def test_an_unexpected_error_is_a_logged_and_counted_500(server, http, channel, access, monkeypatch):
    def boom():
        raise ZeroDivisionError("secret detail")

    monkeypatch.setattr(server.engine, "info", boom)
    before = (failures(server, route="/info", transport="http", status="500", error_type="backend_error"),
              failures(server, route="/electric.v1.Info/GetInfo", transport="grpc", status="INTERNAL",
                       error_type="backend_error"))
    r = http.get("/info")
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert r.json() == {"error": "internal error (ZeroDivisionError)", "error_type": "backend_error"}
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.InfoStub(channel).GetInfo(pb.InfoRequest(), metadata=GRPC_AUTH)
    assert e.value.code() == grpc.StatusCode.INTERNAL and "secret" not in e.value.details()
    lines = [("http", "/info", 500, "backend_error"),
             ("grpc", "/electric.v1.Info/GetInfo", "INTERNAL", "backend_error")]
    assert eventually(lambda: [(x["transport"], x["route"], x["status"], x.get("error_type")) for x in access()],
                      lines) == lines
    after = (failures(server, route="/info", transport="http", status="500", error_type="backend_error"),
             failures(server, route="/electric.v1.Info/GetInfo", transport="grpc", status="INTERNAL",
                      error_type="backend_error"))
    assert after == (before[0] + 1, before[1] + 1)


def test_refused_calls_are_logged_and_counted_with_their_status(server, http, access):
    before = failures(server, route="/electric.v1.Scoring/Score", transport="grpc", status="UNAUTHENTICATED",
                      error_type="unauthorized")
    with grpc.insecure_channel(server.grpc_target) as ch, pytest.raises(grpc.RpcError) as e:
        pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=["a"]))  # no key
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    r = post_raw(http, "/v1/score", r'{"texts": ["\ud800"]}')
    assert r.status_code == 422
    lines = sorted([("/electric.v1.Scoring/Score", "UNAUTHENTICATED"), ("/v1/score", 422)], key=str)
    # sorted: the gRPC line is written as its call ends, which a loaded machine can schedule after the HTTP one
    assert eventually(lambda: sorted(((x["route"], x["status"]) for x in access()), key=str), lines) == lines
    assert failures(server, route="/electric.v1.Scoring/Score", transport="grpc", status="UNAUTHENTICATED",
                    error_type="unauthorized") == before + 1
    assert failures(server, route="/v1/score", transport="http", status="422", error_type="validation_error") >= 1


# ---- item 5: the shutdown grace runs out ---------------------------------------------------------------------

@pytest.mark.integration
def test_requests_still_running_when_the_grace_is_over_get_503_json_and_unavailable(disc_dir, caplog):
    caplog.set_level(logging.INFO)
    s = Settings(model=disc_dir, http_port=0, grpc_port=0, threads=1, warmup=False, shutdown_grace_s=0.2)
    srv = BackgroundServer(s, loader=controlled_loader()).start()
    backend = srv.engine.models["scorer"].model.backend
    backend.hold()  # every batch outlasts the grace
    stuck_reached = threading.Event()

    async def stuck(*args, **kwargs):  # a handler that never reaches the engine: uvicorn cancels it
        stuck_reached.set()
        await asyncio.sleep(3600)

    srv.engine.detect = stuck
    url, target = srv.url, srv.grpc_target
    replies: dict = {}

    def via_http(route):
        replies[route] = httpx.post(f"{url}{route}", json={"texts": ["in flight"]}, timeout=60)

    def via_grpc():
        with grpc.insecure_channel(target) as ch:
            try:
                pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=["in flight too"]), timeout=60)
                replies["grpc"] = "OK"
            except grpc.RpcError as e:
                replies["grpc"] = (e.code(), e.details(), dict(e.trailing_metadata() or ()))

    clients = [threading.Thread(target=via_http, args=("/v1/score",)),
               threading.Thread(target=via_http, args=("/v1/detect",)), threading.Thread(target=via_grpc)]
    for t in clients:
        t.start()
    wait_until(lambda: srv.engine.in_flight == 2, "the score requests to be admitted")  # (detect never is)
    assert stuck_reached.wait(30), "the detect request never reached its handler"
    stopper = threading.Thread(target=srv.stop)
    stopper.start()
    for t in clients:  # answered when the grace is over, while their batch is still held
        t.join(60)
    backend.release()
    stopper.join(60)
    for route in ("/v1/score", "/v1/detect"):
        r = replies[route]
        assert r.status_code == 503 and r.headers["content-type"] == "application/json", (route, r.text)
        assert r.json()["error_type"] == "shutting_down" and "shutting down" in r.json()["error"]
        assert r.headers["retry-after"] == "1" and r.headers["retry-after-ms"] == "1000"
    code, details, trailers = replies["grpc"]
    assert code == grpc.StatusCode.UNAVAILABLE and "shutting down" in details
    assert trailers["error-type"] == "shutting_down" and trailers["grpc-retry-pushback-ms"] == "1000"
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "electric.access"]  # server stopped
    assert sorted((x["route"], x["status"], x["error_type"]) for x in logged) == [
        ("/electric.v1.Scoring/Score", "UNAVAILABLE", "shutting_down"),
        ("/v1/detect", 503, "shutting_down"), ("/v1/score", 503, "shutting_down")]
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith("uvicorn")]  # no tracebacks


# ---- item 8: contract and docs ---------------------------------------------------------------------------------

def test_exactly_the_documented_routes_answer_without_the_key(server):
    from starlette.routing import Route

    routes = [(r.path, r.method) for r in ROUTES]  # the API, then the pages FastAPI routes
    routes += [(r.path, sorted(r.methods)[0]) for r in server.app.routes if isinstance(r, Route)]
    assert {p for p, _ in routes} >= set(OPEN_HTTP_PATHS) | {"/v1/score", "/info"}
    with httpx.Client(base_url=server.url, timeout=10) as anon:
        open_paths = {path for path, method in routes
                      if anon.request(method, path.replace("{", "").replace("}", "")).status_code != 401}
    assert open_paths == set(OPEN_HTTP_PATHS)
    help_text = Settings.model_fields["api_key"].description
    docs = (REPO / "docs" / "server.md").read_text()
    in_docs = docs.split("not needed for", 1)[1].split(")", 1)[0]  # "(not needed for `/health`, ...)"
    for path in OPEN_HTTP_PATHS:
        assert path in help_text and f"`{path}`" in in_docs, path
    assert "gRPC health and reflection" in help_text and "gRPC health and reflection" in in_docs


def test_405_carries_allow_and_400_is_documented(server, http):
    r = http.get("/v1/score")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json()["error_type"] == "method_not_allowed"
    r = http.post("/v1/score", content=b'{"texts": ["caf\xe9"]}', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error_type"] == "http_error"  # latin-1, not UTF-8
    api = http.get("/openapi.json").json()
    for route in ("/v1/score", "/v1/rerank", "/v1/detect", "/v1/classify"):
        assert api["paths"][route]["post"]["responses"]["400"]["content"]["application/json"]["schema"]["$ref"] \
            .endswith("/ErrorResponse")
    assert "http_error" in (REPO / "docs" / "server.md").read_text()


def test_openapi_says_lists_are_non_empty_and_examples_run(server, http):
    api = http.get("/openapi.json").json()
    schemas = api["components"]["schemas"]

    def arrays(schema, where):
        if schema.get("type") == "array":
            yield where, schema
        for key in ("anyOf", "items"):
            sub = schema.get(key)
            for s in sub if isinstance(sub, list) else [sub] if sub else []:
                yield from arrays(s, where)

    names = ("ScoreRequest", "RerankRequest", "NBestListBody", "DetectRequest", "ClassifyRequest")
    found = [(f"{n}.{p}", a) for n in names for p, prop in schemas[n]["properties"].items()
             for _, a in arrays(prop, p)]
    assert {w for w, _ in found} >= {"ScoreRequest.texts", "RerankRequest.lists", "RerankRequest.hypotheses",
                                     "NBestListBody.hypotheses", "DetectRequest.texts", "ClassifyRequest.pairs"}
    assert all(a.get("minItems", 0) >= 1 for _, a in found), [w for w, a in found if not a.get("minItems")]
    r = http.post("/v1/score", json={"texts": []})
    assert r.status_code == 422 and r.json()["error"].startswith("texts: ")
    # every /v1/classify example runs on a server whose only classifier is not named in it
    for example in schemas["ClassifyRequest"]["examples"]:
        r = http.post("/v1/classify", json=example)
        assert r.status_code == 200, (example, r.text)
