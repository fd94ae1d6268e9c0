"""electric.client: the values it returns (the library's own, the same over HTTP and gRPC, sync and async), how it
cuts a call to the server's limits, its retries and their caps, and its one-line errors - against real servers
started here (an `electric export` of a tiny discriminator), and a scripted stand-in where only a server's words
matter (Retry-After, another program on the port)."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from pathlib import Path

import pytest

from electric.client import (
    ApiMismatch,
    AsyncClient,
    Client,
    Limits,
    RejectedInput,
    Retry,
    ServerBusy,
    ServerUnavailable,
    Unreachable,
    WrongKey,
    plans,
)
from electric.client.errors import renumbered, server_error
from electric.client.transports import parse_url
from electric.results import (
    Classification,
    Detection,
    RerankedList,
    TextScore,
    TokenDetection,
    TokenLabel,
    TokenScore,
    WordDetection,
)
from tests.server.helpers import KEY, controlled_loader, failures, free_port

TEXTS = ["show me flights from boston to denver", "show me fights from boston to denver", "list all flights",
         "the cat sat on the mat", "what is the cheapest fare to dallas"]
LIMITS = Limits(max_inputs_per_request=8, max_tokens_per_input=128, max_input_chars=1000, max_batch_tokens=8192,
                max_batch_size=128, max_concurrent_requests=512, max_body_bytes=4096, max_wait_ms=0.0,
                request_timeout_s=30.0)


# ---- values and plans, no server -------------------------------------------------------------------------------

def test_results_round_trip_through_their_dicts():
    score = TextScore("a b", -3.5, -1.75, 2, "cloze", True, [TokenScore("a", 0, 1, -1.0), TokenScore("b", 2, 3, -2.5)])
    detection = Detection("a b", -0.2, -0.1, 2, [TokenDetection("a", 0, 1, 0.1, -2.2)],
                          [WordDetection("a", 0, 1, 0.1, 0.1, 1)], True)
    reranked = RerankedList("u1", [1, 0], ["b", "a"], [-1.0, -2.0], [0.0, -1.0], [-1.0, -1.0], [1, 1], True, [1, 1])
    labels = Classification(None, {"O": 0.9, "B": 0.1}, None, [TokenLabel("a", 0, 1, "O", 0.9)],
                            [TokenLabel("a", 0, 1, "O", 0.9)])
    for x in (score, TextScore("a", -1.0, -1.0, 1), detection, reranked, labels, Classification("pos", {"pos": 1.0}),
              Classification(None, value=0.5)):
        assert type(x).from_dict(json.loads(json.dumps(x.to_dict()))) == x
    assert Detection.from_dict(detection.to_dict(per_token=False)).tokens == []


def test_a_call_is_cut_into_balanced_requests_within_the_limits_in_order():
    texts = [f"text number {i}" for i in range(50)]
    plan = plans.detect(texts, per_token=True, truncate=False)
    reqs = plan.requests("http://x", LIMITS, concurrency=4)
    assert [r.offset for r in reqs] == list(range(0, 50, 8))  # at most 8 inputs a request
    assert [t for r in reqs for t in r.payload["texts"]] == texts
    assert all(len(plans.json_bytes(r.payload)) <= LIMITS.max_body_bytes for r in reqs)
    # a call goes out as about `concurrency` requests, never of fewer than 64 inputs, shared evenly among them
    roomy = Limits(**{**vars(LIMITS), "max_inputs_per_request": 256})
    many = plans.detect(texts * 4, True, False).requests("http://x", roomy, 4)
    assert [len(r.payload["texts"]) for r in many] == [50] * 4
    assert [len(r.payload["texts"]) for r in plans.detect(texts * 2, True, False).requests("http://x", roomy, 8)] \
        == [50, 50]  # not 64 and 36
    lines = plans.detect([f"line {i}" for i in range(1024)], True, False).requests("http://x", roomy, 64)
    assert [len(r.payload["texts"]) for r in lines] == [64] * 16  # not 64 requests of 16
    # bytes cut too: 30 texts of 500 characters fill 4096 bytes after 7 or so
    long = [("x" * 499) + str(i % 10) for i in range(30)]
    reqs = plans.detect(long, True, False).requests("http://x", LIMITS, 1)
    assert len(reqs) > 30 / 8 and all(len(plans.json_bytes(r.payload)) <= LIMITS.max_body_bytes for r in reqs)
    assert [t for r in reqs for t in r.payload["texts"]] == long
    # rerank counts hypotheses, and numbers lists without an id by their place in the call
    lists = [["a b", "a c", "a d"]] * 7
    reqs = plans.rerank(lists, None, False).requests("http://x", LIMITS, 1)
    assert [len(r.payload["lists"]) for r in reqs] == [2, 2, 2, 1]
    assert [x["id"] for r in reqs for x in r.payload["lists"]] == [str(i) for i in range(7)]
    assert "weights" not in reqs[0].payload  # none given: the server applies the model's own
    assert plans.rerank(lists, {"lm": 0.5, "length": None}, False).body([])["weights"] == {"lm": 0.5}


def test_an_input_that_cannot_fit_a_request_alone_is_refused_naming_it_before_anything_is_sent():
    texts = ["short"] * 20 + ["y" * 5000] + ["short"]
    with pytest.raises(RejectedInput, match=r"^http://x: input 20 takes 5\d\d\d bytes, more than a request") as e:
        plans.score(texts, None, False, False, _info()).requests("http://x", LIMITS, 1)
    assert e.value.index == 20
    with pytest.raises(RejectedInput, match=r"lists\[1\] has 9 inputs, more than the server takes in one request"):
        plans.rerank([["a"], ["b"] * 9], None, False).requests("http://x", LIMITS, 1)


def test_a_refusal_names_the_input_by_its_place_in_the_call():
    err = server_error("http://x/v1/score", 422, "validation_error", "input 3 has 2000 characters, more than the limit")
    assert isinstance(err, RejectedInput) and err.index == 3
    moved = renumbered(err, 512)
    assert moved.index == 515 and str(moved) == ("http://x/v1/score: 422 validation_error: input 515 has 2000 "
                                                 "characters, more than the limit")
    err = server_error("grpc://x Scoring/Rerank", "INVALID_ARGUMENT", "validation_error",
                       "lists[2].hypotheses[1] is empty")
    assert renumbered(err, 10).message == "lists[12].hypotheses[1] is empty"
    assert isinstance(server_error("g", "UNAVAILABLE", None, "failed to connect"), Unreachable)  # not the server's
    assert isinstance(server_error("g", "RESOURCE_EXHAUSTED", "overloaded", "busy", 2.0), ServerBusy)


def test_retries_wait_what_the_server_says_within_their_caps():
    busy = ServerBusy("u", "busy", status=429, retry_after=3.0)
    retry = Retry(attempts=4, total_s=10.0, max_wait_s=5.0, backoff_s=0.5)
    assert 3.0 <= retry.wait(busy, 1, 0.0) <= 3.3  # Retry-After, up to 10% more
    assert 5.0 <= retry.wait(ServerBusy("u", "busy", retry_after=60.0), 1, 0.0) <= 5.5  # capped
    assert 1.0 <= retry.wait(ServerUnavailable("u", "loading"), 2, 0.0) <= 1.1  # 0.5 doubled
    assert retry.wait(busy, 4, 0.0) is None  # the 4th try was the last
    assert retry.wait(busy, 1, 8.0) is None  # would end past total_s
    assert retry.wait(WrongKey("u", "no"), 1, 0.0) is None and retry.wait(RejectedInput("u", "bad"), 1, 0.0) is None
    assert "gave up after 3 tries in 4.5 s" in str(Retry.spent(busy, 3, 4.5))


def test_the_address_says_the_transport():
    assert parse_url("http://h:1/", None) == ("http", "http://h:1")
    assert parse_url("grpc://h:2", None) == ("grpc", "grpc://h:2") == parse_url("h:2", "grpc")
    assert parse_url("h:1", None) == ("http", "http://h:1")
    for bad, transport in (("ftp://h", None), ("grpc://h:2", "http"), ("http://", None), ("h:1", "smoke")):
        with pytest.raises(ValueError):
            parse_url(bad, transport)


def _info(**limits) -> object:
    from electric.client import ServerInfo

    return ServerInfo.from_dict(_info_json(**limits))


def _info_json(**limits) -> dict:
    model = {"name": "scorer", "kind": "discriminator", "method": "electric", "path": "/m", "backend": "onnx",
             "max_length": 128, "trained_length": 128, "max_positions": 128, "providers": ["CPUExecutionProvider"],
             "labels": [], "regression": False, "training_warnings": [], "added_by_a_newer_server": 1}
    return {"version": "0.1.0", "ready": True, "models": [model], "limits": {**vars(LIMITS), **limits},
            "rerank_defaults": {"lm": 1.0, "length": 0.0, "beta": 1.0, "prior": "none", "piece": 0.0,
                                "lm_score": "sum"}}


# ---- a scripted stand-in: only what a server says --------------------------------------------------------------

class Scripted(http.server.ThreadingHTTPServer):
    """Answers GET /info with an electric server's info (unless `info` is False) and each POST with the next of
    `answers` (status, headers, body), recording when each came."""

    def __init__(self, answers: list[tuple[int, dict, object]], info: bool = True):
        self.answers, self.info, self.times = list(answers), info, []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self._send(*((200, {}, _info_json()) if outer.info else (404, {}, "<html>Not Found</html>")))

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.times.append(time.monotonic())
                self._send(*(outer.answers.pop(0) if outer.answers else (404, {}, "<html>Not Found</html>")))

            def _send(self, status, headers, body):
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                for k, v in {"content-length": str(len(data)), **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


SCORED = {"model": "scorer", "results": [{"text": "a", "score": -1.0, "mean": -1.0, "num_tokens": 1,
                                          "method": "electric"}]}


def test_the_client_keeps_its_threads_between_calls_and_ends_them_when_closed():
    """Threads made for each call cost `electric score --server` more CPU than its requests did: one set of at most
    `concurrency`, the same for every call, gone after close()."""
    stand_in = Scripted([(200, {}, SCORED)] * 12)

    others = {t for t in threading.enumerate() if t.name.startswith("electric-client")}  # other tests' clients

    def senders() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("electric-client") and t not in others}

    try:
        c = Client(stand_in.url, concurrency=3)
        texts = [f"text {i}" for i in range(4 * 8)]  # 4 requests a call (the stand-in takes 8 inputs a request)
        assert len(c.score(texts)) == 4  # the stand-in answers one result a request
        first = senders()
        assert 1 <= len(first) <= 3
        c.score(texts)
        c.score(texts)
        assert senders() == first and all(t.is_alive() for t in first)
        c.close()
        assert not senders() and len(stand_in.times) == 12
    finally:
        stand_in.shutdown()


def test_a_busy_server_is_asked_again_after_its_retry_after():
    busy = (429, {"retry-after": "1"}, {"error": "1 requests in flight", "error_type": "overloaded"})
    stand_in = Scripted([busy, (200, {}, SCORED)])
    try:
        with Client(stand_in.url) as c:
            assert c.score(["a"]) == [TextScore("a", -1.0, -1.0, 1)]
        assert len(stand_in.times) == 2 and stand_in.times[1] - stand_in.times[0] >= 1.0
    finally:
        stand_in.shutdown()
    stand_in = Scripted([busy] * 5)
    try:
        with Client(stand_in.url, retry=Retry(attempts=3, max_wait_s=0.05)) as c, pytest.raises(ServerBusy) as e:
            c.score(["a"])
        assert len(stand_in.times) == 3 and "gave up after 3 tries" in str(e.value) and "\n" not in str(e.value)
        assert str(e.value).startswith(f"{stand_in.url}/v1/score: 429 overloaded: 1 requests in flight")
    finally:
        stand_in.shutdown()


def test_the_client_waits_what_the_server_said_not_its_own_backoff():
    """Issue 59: `retry-after-ms` (the server's estimate) over the whole seconds of Retry-After, which it rounds up;
    and every wait is the server's, not the doubling backoff (0.25, 0.5, 1, 2 s)."""
    busy = (429, {"retry-after": "1", "retry-after-ms": "400"}, {"error": "1 requests in flight",
                                                                 "error_type": "overloaded"})
    stand_in = Scripted([busy] * 4 + [(200, {}, SCORED)])
    try:
        with Client(stand_in.url) as c:
            assert c.score(["a"]) == [TextScore("a", -1.0, -1.0, 1)]
        gaps = [b - a for a, b in zip(stand_in.times[:-1], stand_in.times[1:], strict=True)]
        assert len(gaps) == 4 and all(0.4 <= g < 0.7 for g in gaps), gaps  # 0.4 s and up to 10% more, each
    finally:
        stand_in.shutdown()


def test_the_grpc_pushback_is_read_as_seconds():
    from electric.client.errors import retry_after
    from electric.client.transports import _grpc_failure

    class Refusal:  # what a grpc.RpcError gives
        def code(self):
            return type("Code", (), {"name": "RESOURCE_EXHAUSTED"})

        def details(self):
            return "1 requests in flight"

        def trailing_metadata(self):
            return (("error-type", "overloaded"), ("grpc-retry-pushback-ms", "1250"))

    err = _grpc_failure("grpc://h:1 Scoring/Score", Refusal(), 60.0)
    assert isinstance(err, ServerBusy) and err.retry_after == 1.25
    assert retry_after("3", "250") == 0.25 and retry_after("3") == 3.0 and retry_after(None, "soon") is None
    assert retry_after("-1") is None and retry_after("nan") is None and retry_after() is None


def test_another_program_on_the_port_or_nothing_at_all_is_one_line_naming_the_url():
    stand_in = Scripted([], info=False)
    try:
        with Client(stand_in.url) as c, pytest.raises(ApiMismatch) as e:
            c.score(["a"])
        assert str(e.value) == f"{stand_in.url}/info: 404: <html>Not Found</html>"
    finally:
        stand_in.shutdown()
    stand_in = Scripted([(404, {}, {"error": "Not Found", "error_type": "not_found"})])  # an older API's routes
    try:
        with Client(stand_in.url) as c, pytest.raises(ApiMismatch, match="/v1/score: 404 not_found: Not Found"):
            c.score(["a"])
    finally:
        stand_in.shutdown()
    url = f"http://127.0.0.1:{free_port()}"
    for client in (Client(url), Client(url.replace("http", "grpc"))):
        with client as c:
            with pytest.raises(Unreachable) as e:
                c.score(["a"])
            assert not c.ready()
        assert str(e.value).startswith(c.url) and "\n" not in str(e.value)


# ---- real servers ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def onnx_dir(disc_dir, tmp_path_factory) -> Path:
    pytest.importorskip("onnx")
    from electric.export.exporter import export_model

    out = tmp_path_factory.mktemp("client-onnx") / "onnx"
    export_model(disc_dir, out, log=lambda _: None)
    return out


@pytest.fixture(scope="module")
def server(onnx_dir):
    from server.app import BackgroundServer
    from server.settings import Settings

    settings = Settings(model=onnx_dir, http_port=0, grpc_port=0, threads=1, access_log=False, api_key=KEY,
                        max_inputs_per_request=8, max_body_bytes=4096, max_input_chars=1000)
    with BackgroundServer(settings) as s:
        yield s


def addresses(server) -> list[str]:
    return [server.url, f"grpc://{server.grpc_target}"]


def test_http_grpc_sync_and_async_give_the_library_s_own_values(server, onnx_dir):
    from electric.inference.scoring import load_scorer

    lists = [{"hypotheses": TEXTS[:2], "scores": [-1.0, -1.5], "id": "u0"}, TEXTS[2:]]
    answers = []
    for url in addresses(server):
        with Client(url, KEY) as c:
            answers.append((c.score(TEXTS, per_token=True), c.detect(TEXTS), c.rerank(lists, {"lm": 0.5}),
                            c.score(TEXTS, "electra")))

        async def call(client: AsyncClient):
            async with client as c:
                return (await c.score(TEXTS, per_token=True), await c.detect(TEXTS),
                        await c.rerank(lists, {"lm": 0.5}), await c.score(TEXTS, "electra"))

        answers.append(asyncio.run(call(AsyncClient(url, KEY))))  # made outside the event loop that uses it
    assert all(a == answers[0] for a in answers[1:])  # the very same floats, whichever transport
    scores, detections, reranked, electra = answers[0]
    local = load_scorer(onnx_dir, "electric")
    tolerance = json.loads((onnx_dir / "electric.json").read_text())["parity"]["fp32"]["tolerance"]
    for mine, theirs in zip(scores, local.score(TEXTS, per_token=True), strict=True):
        assert mine.text == theirs.text and mine.num_tokens == theirs.num_tokens and mine.method == "electric"
        assert abs(mine.score - theirs.score) <= tolerance * mine.num_tokens
    for mine, theirs in zip(detections, local.detect(TEXTS), strict=True):
        assert [w.word for w in mine.words] == [w.word for w in theirs.words]
        assert abs(mine.score - theirs.score) <= tolerance * mine.num_tokens
    assert [e.score for e in electra] == [d.score for d in detections] and electra[0].method == "electra"
    assert [r.utt_id for r in reranked] == ["u0", "1"] and reranked[0].prior[0] in (-1.0, -1.5)
    assert sorted(reranked[1].hyps) == sorted(TEXTS[2:])


def test_a_call_over_the_limits_is_cut_and_answered_in_order(server):
    texts = [f"{TEXTS[i % 5]} number {i}" for i in range(100)] + ["z" * 900] * 6  # 8 a request, 4096 bytes
    for url in addresses(server):
        with Client(url, KEY, concurrency=3) as c:
            assert [r.text for r in c.score(texts)] == texts
            assert [r.utt_id for r in c.rerank([[t, t + " too"] for t in texts[:30]])] == [str(i) for i in range(30)]


def test_an_input_the_server_refuses_is_named_by_its_place_in_the_call(server):
    texts = TEXTS * 8 + ["w " * 600] + TEXTS  # input 40: 1200 characters, over max_input_chars
    for url in addresses(server):
        with Client(url, KEY, concurrency=2) as c:
            with pytest.raises(RejectedInput) as e:
                c.score(texts)
            assert e.value.index == 40 and "input 40 has 1200 characters, more than the limit of 1000" in str(e.value)
            assert str(e.value).startswith(url) and "\n" not in str(e.value)
            with pytest.raises(RejectedInput, match=r"input 10 takes \d+ bytes") as e:
                c.score(TEXTS * 2 + ["\u00e9" * 2500])  # 5000 bytes: no request may hold it
            assert e.value.index == 10 and e.value.status is None  # refused here: nothing was sent


def test_a_wrong_key_is_one_line_and_never_retried(server):
    for url in addresses(server):
        before = failures(server, status="401") + failures(server, status="UNAUTHENTICATED")
        with Client(url, "not-the-key") as c, pytest.raises(WrongKey) as e:
            c.score(["a"])
        assert "missing or wrong API key" in str(e.value) and "\n" not in str(e.value)
        assert failures(server, status="401") + failures(server, status="UNAUTHENTICATED") == before + 1


def test_an_overloaded_server_is_asked_again_until_it_answers(onnx_dir):
    from server.app import BackgroundServer
    from server.settings import Settings

    settings = Settings(model=onnx_dir, http_port=0, grpc_port=0, threads=1, access_log=False,
                        max_concurrent_requests=1)
    with BackgroundServer(settings, loader=controlled_loader()) as s:
        backend = s.engine.models["scorer"].model.backend
        for url in addresses(s):
            with Client(url) as first, Client(url, retry=Retry(backoff_s=0.05, total_s=60)) as second:
                first.info(), second.info()
                backend.hold()
                held = threading.Thread(target=first.score, args=(["held"],))
                held.start()
                assert backend.running.wait(30)
                threading.Timer(0.5, backend.release).start()
                assert [r.text for r in second.score(TEXTS)] == TEXTS  # turned away (429), then answered
                held.join(30)
            with Client(url, retry=Retry(attempts=3, backoff_s=0.01)) as third:
                backend.hold()
                held = threading.Thread(target=Client(url).score, args=(["held"],))
                held.start()
                assert backend.running.wait(30)
                with pytest.raises(ServerBusy, match="gave up after 3 tries"):
                    third.score(["a"])
                backend.release()
                held.join(30)
        assert failures(s, status="429") >= 2 and failures(s, status="RESOURCE_EXHAUSTED") >= 2


@pytest.mark.integration
def test_a_server_still_loading_is_waited_for_then_named(onnx_dir):
    from server.app import BackgroundServer
    from server.settings import Settings

    gate = threading.Event()
    settings = Settings(model=onnx_dir, http_port=0, grpc_port=0, threads=1, access_log=False)
    with BackgroundServer(settings, loader=controlled_loader(gate), wait_ready=False) as s:
        for url in addresses(s):
            with Client(url, retry=Retry(total_s=0.5, max_wait_s=0.05)) as c:  # not the 1 s the server says
                assert not c.ready()
                with pytest.raises(ServerUnavailable) as e:
                    c.score(["a"])
                assert "not_ready: the models are still loading (gave up after" in str(e.value)
                assert str(e.value).startswith(url)
        threading.Timer(0.3, gate.set).start()
        with Client(s.url, retry=Retry(backoff_s=0.05)) as c:
            assert [r.text for r in c.score(["a", "b"])] == ["a", "b"] and c.ready()


# everything the serving install has that the client must not need (a client-only install lacks them)
NOT_THE_CLIENTS = ("numpy", "onnxruntime", "tokenizers", "fastapi", "starlette", "uvicorn", "pydantic",
                   "pydantic_settings", "prometheus_client", "tqdm", "torch", "transformers", "server", "training")
CLIENT_ONLY = f"""
import sys
sys.modules.update({{name: None for name in {NOT_THE_CLIENTS!r} + tuple(sys.argv[3:])}})
from electric.client import Client
with Client(sys.argv[1], sys.argv[2]) as c:
    print(c.score(["show me flights to denver"])[0].num_tokens, c.rerank([["a b", "a c"]])[0].order)
print(" ".join(sorted({{m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("httpx", "grpc", "google")}})))
"""


def test_the_client_needs_only_what_its_extra_installs(server):
    """With none of the serving install's other packages importable, the client calls the server over HTTP with
    httpx alone and over gRPC with grpcio and protobuf alone: the `client` extra's packages."""
    import re
    import subprocess
    import sys

    tomllib = pytest.importorskip("tomllib")
    extra = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["client"]
    assert {re.split(r"[<>=]", r)[0] for r in extra} == {"httpx", "grpcio", "protobuf"}
    for url, blocked, uses in ((server.url, ("grpc", "google"), {"httpx"}),
                               (f"grpc://{server.grpc_target}", ("httpx",), {"grpc", "google"})):
        p = subprocess.run([sys.executable, "-c", CLIENT_ONLY, url, KEY, *blocked], capture_output=True, text=True,
                           timeout=120, cwd=Path(__file__).resolve().parents[1])
        assert p.returncode == 0, p.stderr[-3000:]
        first, modules = p.stdout.splitlines()
        assert first.split()[0] != "0" and uses <= set(modules.split())
