"""Issue 30: no request within the limits can stall the server for everyone else.

- Item 1: a body within max_body_bytes that holds 300,000 inputs of the wrong type (`{"texts": [0] * 300000}`)
  is refused from its list's length (413) before any input is looked at, and one within the count limit from
  its first bad element (one error, not one per element); over HTTP and gRPC; small requests sent alongside are
  answered.
- Item 2: a request head over max_header_bytes, or with more than max_headers headers, is a 431 (or a closed
  connection) before the API key is checked or the body read, while other clients are answered.
- Item 3: admission counts work, not requests: a burst of big requests that cannot all finish within their deadline
  gets 429 with Retry-After (RESOURCE_EXHAUSTED over gRPC) for the ones that would not, never 504, while small
  requests sent alongside are answered; idle after the burst, the server gives its freed memory back.

Every test starts a server (BackgroundServer on conftest's random tiny discriminator): integration.
"""

from __future__ import annotations

import json
import socket
import threading

import grpc
import httpx
import pytest

from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from server.app import BackgroundServer
from server.settings import Settings
from tests.server.helpers import AUTH, GRPC_AUTH, KEY, failures

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.integration]

MAX_INPUTS = 256  # the default max_inputs_per_request
PLUS_JSON = "application/x+json"  # JSON too: read, counted and validated as application/json is
MAX_HEADER_BYTES = 65_536  # the default max_header_bytes
SMALL = {"texts": ["show me flights from boston to denver"]}


@pytest.fixture(scope="module")
def server(disc_dir):
    s = Settings(model=disc_dir, http_port=0, grpc_port=0, api_key=KEY, threads=1, warmup=False, access_log=False)
    with BackgroundServer(s) as srv:
        yield srv


def alongside(server, big_calls: list) -> list:
    """Run `big_calls` in threads while small requests go to the same server, one after another, until every big
    call has returned; every small request must be answered 200. The big calls' results, in order."""
    results: list = [None] * len(big_calls)

    def run(i, call):
        results[i] = call()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(big_calls)]
    small = []
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as c:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads) or not small:
            small.append(c.post("/v1/score", json=SMALL).status_code)
    for t in threads:
        t.join()
    assert set(small) == {200}, small
    return results


# ---- item 1: bodies within every limit -------------------------------------------------------------------------

def test_300000_non_texts_are_refused_from_the_count_while_small_requests_are_answered(server):
    big = json.dumps({"texts": [0] * 300_000}).encode()  # 900 KB, under max_body_bytes
    assert len(big) < server.settings.max_body_bytes

    def post(headers):
        return lambda: httpx.post(f"{server.url}/v1/score", content=big, headers={**AUTH, **headers}, timeout=60)

    json_, plus = post({"content-type": "application/json"}), post({"content-type": PLUS_JSON})
    replies = alongside(server, [json_, json_, json_, json_, plus])
    for r in replies:
        assert r.status_code == 413, r.text
        assert r.json() == {"error": f"300000 texts in one request, the limit is {MAX_INPUTS}",
                            "error_type": "payload_too_large"}


@pytest.mark.parametrize("body, error", [
    ({"texts": ["ok"] * 10 + [0] * (MAX_INPUTS - 10)}, "texts[10]: Input should be a valid string"),
    ({"texts": ["ok"], **{f"k{i}": 0 for i in range(60_000)}}, "k0: Extra inputs are not permitted"),
    ({"hypotheses": ["a", "b"], "scores": [0.0, "x"] * (MAX_INPUTS // 2)}, "scores[1]: Input should be a valid number"),
    ({"hypotheses": ["a"], "weights": {f"w{i}": 0 for i in range(60_000)}}, "weights.w0: Extra inputs are not permitted"),
    ({"lists": [{"hypotheses": ["a"]}, {"hypotheses": [1] * 200}]}, "lists[1].hypotheses[0]: Input should be a valid "
                                                                    "string"),
    ({"pairs": [["a", "b"], ["c", 0, 0, 0]] + [[0, 0]] * 200}, "pairs[1][1]: Input should be a valid string"),
], ids=["texts", "unknown-keys", "scores", "weight-keys", "nested-lists", "pairs"])
def test_a_body_within_the_count_is_refused_at_its_first_bad_element(server, body, error):
    route = "/v1/classify" if "pairs" in body else "/v1/rerank" if "texts" not in body else "/v1/score"
    for ctype in ("application/json", PLUS_JSON):
        r = httpx.post(f"{server.url}{route}", content=json.dumps(body).encode(),
                       headers={**AUTH, "content-type": ctype}, timeout=60)
        assert r.status_code == 422, r.text
        assert r.json() == {"error": error, "error_type": "validation_error"}


@pytest.mark.parametrize("body, error", [
    ({"lists": [{"hypotheses": ["a"]}] * (MAX_INPUTS + 1)}, f"{MAX_INPUTS + 1} lists in one request"),
    ({"lists": [{"hypotheses": ["a"] * 200}, {"hypotheses": ["b"] * 200}]}, "400 hypotheses in one request"),
    ({"hypotheses": ["a"], "scores": [0.0] * 100_000}, "100000 scores in one request"),
    ({"lists": [{"hypotheses": ["a"], "scores": [0.0] * 100_000}]}, "100000 scores in one request"),
], ids=["lists", "hypotheses", "scores", "nested-scores"])
def test_rerank_counts_every_list_before_validation(server, body, error):
    r = httpx.post(f"{server.url}/v1/rerank", json=body, headers=AUTH, timeout=60)
    assert r.status_code == 413 and r.json()["error"] == f"{error}, the limit is {MAX_INPUTS}", r.text


def test_grpc_counts_a_repeated_field_before_looking_at_its_elements(server, monkeypatch):
    from server import grpc_service

    looked = []
    check = grpc_service._non_finite
    monkeypatch.setattr(grpc_service, "_non_finite", lambda msg: looked.append(msg) or check(msg))
    with grpc.insecure_channel(server.grpc_target, options=[("grpc.max_send_message_length", -1)]) as ch:
        def score(texts):
            def call():
                try:
                    return pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=texts), metadata=GRPC_AUTH, timeout=60)
                except grpc.RpcError as e:
                    return e

            return call

        def rerank():
            try:
                return pb_grpc.ScoringStub(ch).Rerank(pb.RerankRequest(
                    lists=[pb.NBestList(hypotheses=["a"], scores=[0.0])] * 60_000), metadata=GRPC_AUTH, timeout=60)
            except grpc.RpcError as e:
                return e

        replies = alongside(server, [score([""] * 300_000), score(["a"] * 300_000), rerank])
    for e, what in zip(replies, ("300000 texts", "300000 texts", "60000 lists"), strict=True):
        assert isinstance(e, grpc.RpcError) and e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
        assert e.details() == f"{what} in one request, the limit is {MAX_INPUTS}"
        assert dict(e.trailing_metadata())["error-type"] == "payload_too_large"
    assert not [m for m in looked if len(getattr(m, "texts", ())) > MAX_INPUTS or len(getattr(m, "lists", ())) > 1]


# ---- item 2: headers -------------------------------------------------------------------------------------------

def send_head(port: int, head: bytes, body: bytes = b"", sent: threading.Event | None = None) -> bytes | None:
    """Send a request head in 64 KiB writes (setting `sent` after the first), then its body; the server's answer,
    or None when it closed the connection before the whole head was sent."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        try:
            for i in range(0, len(head), 65536):
                s.sendall(head[i:i + 65536])
                if sent is not None:
                    sent.set()
            s.sendall(body)
        except (BrokenPipeError, ConnectionResetError):
            return None
        finally:
            if sent is not None:
                sent.set()
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
        return answer


def head(port: int, *headers: bytes, body: bytes = b"") -> bytes:
    lines = [b"POST /v1/score HTTP/1.1", b"host: 127.0.0.1:%d" % port, b"content-type: application/json",
             b"content-length: %d" % len(body), b"connection: close", *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def test_an_oversized_header_is_431_before_the_key_while_others_are_answered(server):
    body = json.dumps(SMALL).encode()
    before = failures(server, route="unmatched", status="431", error_type="headers_too_large")
    huge = head(server.port, b"x-big: " + b"a" * 8_000_000, body=body)  # no API key: 431 comes first
    sent = threading.Event()
    answers = []
    sender = threading.Thread(target=lambda: answers.append(send_head(server.port, huge, body, sent)))
    sender.start()
    assert sent.wait(60)
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as c:  # while the big head is being sent
        assert c.post("/v1/score", json=SMALL).status_code == 200
    sender.join(120)
    [answer] = answers
    assert answer is None or answer.startswith(b"HTTP/1.1 431 "), answer[:300]
    if answer is not None:
        error = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert error == {"error": f"the request line and headers are over the limit of {MAX_HEADER_BYTES} bytes "
                                  "(max_header_bytes)", "error_type": "headers_too_large"}
    assert failures(server, route="unmatched", status="431", error_type="headers_too_large") == before + 1


@pytest.mark.parametrize("headers, answer", [
    ([b"x-h%d: v" % i for i in range(200)], b"HTTP/1.1 431 "),  # too many
    ([b"x-big: " + b"a" * (MAX_HEADER_BYTES - 2000)], b"HTTP/1.1 401 "),  # within the limit: the key is checked
    ([b"x-big: " + b"a" * 200_000], b"HTTP/1.1 431 "),  # over the limit, in fewer reads than it takes to notice
], ids=["200-headers", "62KiB", "200KB"])
def test_header_limits(server, headers, answer):
    body = json.dumps(SMALL).encode()
    got = send_head(server.port, head(server.port, *headers, body=body), body)
    assert got is None and answer.startswith(b"HTTP/1.1 431") or got.startswith(answer), (got or b"")[:300]
    if got is not None and answer.startswith(b"HTTP/1.1 431"):
        assert json.loads(got.partition(b"\r\n\r\n")[2])["error_type"] == "headers_too_large"


# ---- item 3: admission counts work -----------------------------------------------------------------------------

class PacedBackend:
    """A real backend that also takes `SECONDS_PER_TOKEN` per padded token of a batch: a model slow enough, on any
    machine, that 16 big requests cannot all finish within a 3 s deadline while one small one can."""

    SECONDS_PER_TOKEN = 1 / 40_000

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def run(self, input_ids, attention_mask, token_type_ids=None):
        import time

        time.sleep(input_ids.size * self.SECONDS_PER_TOKEN)
        return self.inner.run(input_ids, attention_mask, token_type_ids)


@pytest.fixture(scope="module")
def paced(disc_dir):
    from electric.inference.backend import load_backend

    s = Settings(model=disc_dir, http_port=0, grpc_port=0, api_key=KEY, threads=1, access_log=False,
                 request_timeout_s=3.0, max_concurrent_requests=64)
    with BackgroundServer(s, loader=lambda path, backend: PacedBackend(load_backend(path, backend))) as srv:
        yield srv


BIG = {"texts": [" ".join(["flights from boston to denver on monday morning"] * 20)] * 128, "truncate": True}


def test_a_burst_that_cannot_meet_its_deadline_is_refused_early_with_retry_after(paced):
    def call():
        return httpx.post(f"{paced.url}/v1/score", json=BIG, headers=AUTH, timeout=60)

    answers = alongside(paced, [call] * 16)  # each ~16k tokens, ~0.4 s of the paced model alone
    codes = sorted(a.status_code for a in answers)
    assert set(codes) == {200, 429}, codes  # some admitted and answered, the rest refused - none dropped (504)
    for a in answers:
        if a.status_code == 429:
            assert a.json()["error_type"] == "overloaded" and "deadline" in a.json()["error"]
            assert int(a.headers["retry-after"]) >= 1


def test_grpc_refuses_the_same_burst_with_resource_exhausted_and_when_to_retry(paced):
    req = pb.ScoreRequest(texts=BIG["texts"], truncate=True)
    with grpc.insecure_channel(paced.grpc_target) as ch:
        stub = pb_grpc.ScoringStub(ch)
        futures = [stub.Score.future(req, metadata=GRPC_AUTH, timeout=60) for _ in range(16)]
        refused = []
        for f in futures:
            try:
                f.result()
            except grpc.RpcError as e:
                assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (e.code(), e.details())
                refused.append(dict(e.trailing_metadata()))
    assert refused and len(refused) < 16
    assert all(m["error-type"] == "overloaded" and int(m["grpc-retry-pushback-ms"]) >= 50 for m in refused)


def test_idle_after_requests_the_server_gives_freed_memory_back(paced, monkeypatch):
    import server.engine

    released = threading.Event()
    monkeypatch.setattr(server.engine, "release_free_memory", released.set)
    assert httpx.post(f"{paced.url}/v1/score", json=SMALL, headers=AUTH, timeout=60).status_code == 200
    assert released.wait(30)


def test_a_big_body_is_refused_unread_while_the_backlog_is_past_the_deadline_and_small_ones_are_served(server,
                                                                                                       monkeypatch):
    from server import admission
    from server.errors import Overloaded

    def behind(*_):
        raise Overloaded("the model is busy", retry_after_s=6.5)

    monkeypatch.setattr(admission, "check_backlog", behind)
    garbage = b"{" * 100_000  # never parsed: it would be a 400 if it were
    r = httpx.post(f"{server.url}/v1/score", content=garbage, headers={**AUTH, "content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 429 and r.headers["retry-after"] == "7" and r.json()["error_type"] == "overloaded"
    assert r.headers["retry-after-ms"] == "6500"
    assert httpx.post(f"{server.url}/v1/score", content=b"{" * 100_000, headers={"content-type": "application/json"},
                      timeout=60).status_code == 401  # the key is still checked first
    assert httpx.post(f"{server.url}/v1/score", json=SMALL, headers=AUTH, timeout=60).status_code == 200
