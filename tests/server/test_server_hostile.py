"""Issue 24, hostile input: a body that cannot be read (not UTF-8) is a 400 naming the problem, and one that
cannot be made into values (nested too deeply, issue 51: an integer too long to convert) a 422 naming the field,
after authentication, never a 500; rerank numbers are bounded so no total overflows; truncation never
tokenises much more of a text than it keeps, and a per-input character limit is in /info and the OpenAPI schema;
a small request is not starved by big ones queued before it; an input the tokenizer keeps nothing of is answered
as a blank one (422 / INVALID_ARGUMENT, `score: null` in the CLI, never a winning 0.0); gRPC health says
Classification is NOT_SERVING without a classifier; `electric score --out` makes no folders.

Library and CLI checks run in the fast tier; every test that starts a server (and the CLI runs that load a
model) is marked `integration`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
from types import SimpleNamespace

import grpc
import httpx
import numpy as np
import pytest

from electric.evaluation.nbest import NBestList, Weights, rerank_lists
from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from electric.inference import encoding
from electric.inference.encoding import (
    CAP_CHARS_PER_TOKEN,
    InputTooLongError,
    encode,
    from_encoding,
    rust_tokenizer,
)
from electric.tokenization import load_tokenizer
from server.admission import Pace, cost
from server.app import BackgroundServer
from server.batcher import _Item, _Request
from server.engine import Engine
from server.settings import MAX_ABS_RERANK_SCORE, MAX_ABS_RERANK_WEIGHT, Settings
from server.timing import Timing
from tests.server.helpers import GRPC_AUTH, KEY, failures, read_response

pytestmark = pytest.mark.usefixtures("one_thread")

NO_TOKEN = ["\u200b", "\ufeff", "\u0001\u0002", "\u0301", "\u0000"]  # tokenise to nothing (BERT normaliser)
MAX_CHARS = 5000


@pytest.fixture(scope="module")
def tok(disc_dir):
    return load_tokenizer(disc_dir)


# ---- item 3, library: capped tokenisation --------------------------------------------------------------------

def long_texts() -> list[str]:
    from conftest import require_shared

    lines = require_shared("corpus/enwiki/wiki_00").read_text(encoding="utf-8")[:200_000]
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(lines) - 6000, 40)
    return [lines[s: s + int(n)] for s, n in zip(starts, rng.integers(5, 6000, 40), strict=True)] + [
        "a " * 20_000, "a" * 50_000, "\u200b" * 20_000, "x" * 700 + " y" * 2000, "é" * 3000 + " b" * 3000,
        "word, " * 5000, "日本語" * 3000]


@pytest.mark.parametrize("max_length", [8, 64, 512])
def test_capped_truncation_equals_truncating_the_whole_encoding(tok, max_length):
    texts = long_texts()
    whole = rust_tokenizer(tok).encode_batch(texts, add_special_tokens=True)
    for got, e, text in zip(encode(tok, texts, max_length, truncate=True), whole, texts, strict=True):
        ref = from_encoding(e, text, got.index, max_length, truncate=True)
        assert got.input_ids.tolist() == ref.input_ids.tolist(), text[:40]
        assert got.offsets.tolist() == ref.offsets.tolist() and got.word_ids == ref.word_ids
        assert got.truncated == ref.truncated and got.text == text


class CountingTokenizer:
    """A Rust tokenizer that counts the characters it is asked to encode."""

    def __init__(self, rust):
        self.rust, self.chars = rust, 0

    def encode_batch(self, texts, **kwargs):
        self.chars += sum(len(t) if isinstance(t, str) else len(t[0]) + len(t[1]) for t in texts)
        return self.rust.encode_batch(texts, **kwargs)


def test_truncation_tokenises_a_bounded_prefix_of_a_huge_text(tok, monkeypatch):
    counting = CountingTokenizer(rust_tokenizer(tok))
    monkeypatch.setattr(encoding, "rust_tokenizer", lambda *_: counting)
    huge = "a " * 500_000
    [enc] = encode(tok, [huge], 64, truncate=True)
    assert enc.truncated and enc.length == 64
    assert counting.chars <= CAP_CHARS_PER_TOKEN * 64  # 384 characters of 1,000,000
    with pytest.raises(InputTooLongError) as e:  # without truncation: refused on the same prefix
        encode(tok, [huge], 64)
    assert e.value.at_least  # the refusal names the limit and says where the count stopped (issue 51, item 6)
    assert str(e.value).startswith(f"input 0 has more than the model's maximum of 64 tokens ([CLS] and [SEP] "
                                   f"included; counting stopped at {e.value.num_tokens})")
    assert counting.chars <= 2 * CAP_CHARS_PER_TOKEN * 64


def test_the_engine_tokeniser_caps_texts_and_pairs(tok, monkeypatch):
    counting = CountingTokenizer(rust_tokenizer(tok))
    monkeypatch.setattr(encoding, "rust_tokenizer", lambda tokenizer, max_length=None:
                        counting if max_length is None else rust_tokenizer(tokenizer, max_length))
    huge, short = "boston to denver " * 50_000, "show me flights"
    [[text], [pair], err] = encoding.encode_requests(tok, [([huge], True), ([(short, huge)], True),
                                                           ([(huge, huge)], False)], 64)
    assert text.truncated and text.length == 64 and pair.truncated and pair.length == 64
    whole = rust_tokenizer(tok, 64).encode(short, huge, add_special_tokens=True)  # longest-first, as before
    assert pair.input_ids.tolist() == whole.ids and pair.token_type_ids.tolist() == whole.type_ids
    assert isinstance(err, InputTooLongError) and err.at_least
    assert counting.chars < 20 * CAP_CHARS_PER_TOKEN * 64  # of 4,250,000


@contextlib.contextmanager
def batcher_of(disc_dir, **settings):
    """An engine's batcher, and `request(n)`: a request of n inputs, to fill a slot's queue by hand."""
    engine = Engine(Settings(model=disc_dir, **settings))
    loop = asyncio.new_event_loop()
    try:
        yield engine.batcher, lambda n: _Request(["x"] * n, False, str, None, loop, Timing())
    finally:
        loop.close()
        engine.batcher.worker.shutdown()
        engine.batcher.tokenizer_pool.shutdown()


def slot_of(pending: list, pace: Pace | None = None) -> SimpleNamespace:
    """What take_batch reads of a model slot: its queue, its admission's pace (unmeasured by default) and its model's
    padded length (torch's: the longest row)."""
    return SimpleNamespace(pending=pending, metrics=SimpleNamespace(dropped=None),
                           admission=SimpleNamespace(pace=pace or Pace(256, 512)),
                           model=SimpleNamespace(padded_length=lambda n: n))


def four_long_requests_and_a_short_one(request) -> tuple[list, object, list]:
    """4 requests of 64 inputs of 512 tokens, then one of a 16-token input: (the big ones, the small one, the queue)."""
    bigs, small = [request(64) for _ in range(4)], request(1)
    pending = [_Item(r, i, SimpleNamespace(length=512)) for r in bigs for i in range(64)]
    return bigs, small, [*pending, _Item(small, 0, SimpleNamespace(length=16))]


def test_a_small_request_is_batched_before_the_rest_of_big_ones(disc_dir):
    """Round robin over requests: the next batch takes each waiting request's first input."""
    with batcher_of(disc_dir, max_batch_size=4) as (batcher, request):
        big1, big2, small = request(10), request(10), request(1)
        slot = slot_of([_Item(r, i, SimpleNamespace(length=16)) for r in (big1, big2, small)
                        for i in range(len(r.inputs))])
        batch = batcher.take_batch(slot)
        assert [(it.request, it.index) for it in batch] == [(big1, 0), (big2, 0), (small, 0), (big1, 1)]
        assert len(slot.pending) == 17


def test_a_short_request_rides_in_the_next_batch_beside_big_requests_long_inputs(disc_dir):
    """Issue 30, item 3: big requests' 512-token inputs fill a batch's token budget by themselves; the next batch
    still takes every waiting request's first input, the 16-token one too, before more long inputs."""
    with batcher_of(disc_dir, max_batch_size=64, max_batch_tokens=8192) as (batcher, request):
        _, small, pending = four_long_requests_and_a_short_one(request)
        batch = batcher.take_batch(slot_of(pending))
        assert (small, 0) in [(it.request, it.index) for it in batch]
        assert len(batch) == 8192 // 512  # the budget, padded to the longest


def test_a_batch_is_no_longer_than_max_batch_seconds_at_the_measured_pace(disc_dir):
    """Issue 40, item 4: once 512-token batches are timed, a batch holds only what the pace says runs within
    max_batch_seconds, so a small request that arrives while it runs waits for that long at most; the small one
    already waiting still rides in it."""
    settings = dict(max_batch_size=64, max_batch_tokens=8192, max_batch_seconds=0.25)
    with batcher_of(disc_dir, **settings) as (batcher, request):
        bigs, small, pending = four_long_requests_and_a_short_one(request)
        pace = Pace(256, 512)
        pace.add([512] * 4, 512, seconds=0.4)  # 0.1 s per 512-token input
        batch = batcher.take_batch(slot_of(pending, pace))
        assert [(it.request, it.index) for it in batch] == [(bigs[0], 0), (bigs[1], 0), (small, 0)]
        per_unit = pace.seconds_per_unit()[pace.index(512)]
        assert sum(cost(it.length, 256) for it in batch) * per_unit <= 0.25 < 3 * cost(512, 256) * per_unit
        assert len(batcher.take_batch(slot_of(pending[:-1]))) == 8192 // 512  # unmeasured: the token budget alone


# ---- item 4, library: an unscoreable hypothesis never wins ----------------------------------------------------

def test_a_hypothesis_without_an_lm_score_ranks_last():
    nb = NBestList("u", ["\u200b", "a real one", "another"], None)
    [r] = rerank_lists([nb], [np.array([math.nan, -50.0, -40.0])], Weights(lm=1.0))
    assert r.order == [2, 1, 0] and math.isnan(r.total[-1])


# ---- item 5, CLI: no silent folders -----------------------------------------------------------------------------

def test_score_out_into_a_missing_folder_is_an_error(tmp_path, capsys, disc_dir):
    from electric.cli import main

    src = tmp_path / "in.txt"
    src.write_text("hello world\n")
    rc = main(["score", "--model", str(disc_dir), "--out", str(tmp_path / "missing" / "dir" / "x.jsonl"), str(src)])
    assert rc == 2 and "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()


@pytest.mark.integration
def test_cli_gives_lines_with_no_token_no_score(tmp_path, capsys, disc_dir):
    from electric.cli import main

    lines = [t for t in NO_TOKEN if t != "\u0000"]  # a NUL byte makes the file binary: refused as such
    src = tmp_path / "in.txt"
    src.write_text("\n".join(["hello world", *lines]) + "\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert main(["score", "--model", str(disc_dir), "--quiet", "--out", str(out), str(src)]) == 0
    rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()]
    assert rows[0]["score"] is not None and len(rows) == 1 + len(lines)
    assert all(r["score"] is None and "no token to score" in r["error"] for r in rows[1:])
    assert f"{len(lines)} lines of" in capsys.readouterr().err


@pytest.mark.integration
def test_rerank_cli_never_chooses_a_hypothesis_with_no_token(tmp_path, capsys, disc_dir):
    from electric.cli import main

    lists = [{"input": ["\u200b", "show me flights to denver", "show me fights to denver"], "output": "x"}]
    src, out = tmp_path / "n.json", tmp_path / "r.json"
    src.write_text(json.dumps(lists), encoding="utf-8")
    assert main(["rerank", "--model", str(disc_dir), "--nbest", str(src), "--out", str(out), "--lm-weight", "1",
                 "--quiet"]) == 0
    [got] = json.loads(out.read_text(encoding="utf-8"))
    assert got["input"][-1] == "\u200b" and got["input"][0] != "\u200b"
    assert "no token to score" in capsys.readouterr().err


# ---- the server ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(disc_dir):
    s = Settings(model=disc_dir, http_port=0, grpc_port=0, api_key=KEY, threads=1, warmup=False,
                 max_input_chars=MAX_CHARS, access_log=False)  # metrics are checked; access lines are not
    with BackgroundServer(s) as srv:
        yield srv


def post(http: httpx.Client, route: str, body: bytes, **headers) -> httpx.Response:
    return http.post(route, content=body, headers={"content-type": "application/json", **headers})


DEEP = [  # route, body: each nests too deeply for the parser
    ("/v1/score", '{"texts": ' + "[" * 990 + "]" * 990 + "}"),
    ("/v1/score", '{"texts": ["a"], "x": ' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "}"),
    ("/v1/rerank", '{"hypotheses": ["a"], "weights": ' + "[" * 50_000 + "]" * 50_000 + "}"),
]


@pytest.mark.integration
@pytest.mark.parametrize("route, body", DEEP, ids=["texts-990", "object-100k", "weights-50k"])
def test_deep_json_is_a_422_counted_on_its_route(server, http, route, body):
    before = failures(server, route=route, transport="http", status="422", error_type="validation_error")
    r = post(http, route, body.encode())
    assert r.status_code == 422, r.text
    assert r.json() == {"error": "body: the body nests JSON arrays or objects too deeply to parse",
                        "error_type": "validation_error"}
    assert failures(server, route=route, transport="http", status="422", error_type="validation_error") == before + 1


# Issue 51, item 1: JSON the parser cannot turn into values is a 422 naming the field, never a 500. Python's
# json.loads refuses an integer of more than 4,300 digits (sys.get_int_max_str_digits) with a plain ValueError;
# a float that overflows parses as infinite. Over HTTP only: gRPC's typed messages cannot carry either (an int64
# has at most 19 digits, and a NaN or infinite double is refused by its field, above).
LONG_NUMBERS = [  # route, body with NUMBER in it, the field named
    ("/v1/score", '{"texts": ["a"], "per_token": NUMBER}', "per_token"),
    ("/v1/score", '{"texts": ["a"], "nope": {"x": [0, NUMBER]}}', "nope.x[1]"),
    ("/v1/score", '{"texts": ["a", NUMBER]}', "texts[1]"),
    ("/v1/rerank", '{"hypotheses": ["a", "b"], "scores": [-1.5, -NUMBER]}', "scores[1]"),
    ("/v1/rerank", '{"lists": [{"hypotheses": ["a"], "scores": [NUMBER]}]}', "lists[0].scores[0]"),
]


@pytest.mark.integration
@pytest.mark.parametrize("digits", [4301, 1_000_000])
@pytest.mark.parametrize("route, body, field", LONG_NUMBERS, ids=[f for _, _, f in LONG_NUMBERS])
def test_an_integer_too_long_to_convert_is_a_422_naming_its_field(server, http, route, body, field, digits):
    before = failures(server, route=route, transport="http", status="422", error_type="validation_error")
    r = post(http, route, body.replace("NUMBER", "9" * digits).encode())
    assert r.status_code == 422, r.text[:300]
    assert r.json() == {"error": f"{field}: an integer of {digits} digits, more than the limit of 4300; send a "
                                 "number of at most that many digits", "error_type": "validation_error"}
    assert failures(server, route=route, transport="http", status="422", error_type="validation_error") == before + 1


@pytest.mark.integration
@pytest.mark.parametrize("route, body, field", [
    ("/v1/rerank", '{"hypotheses": ["a", "b"], "scores": [1e400, 0]}', "scores[0]: Input should be a finite number"),
    ("/v1/rerank", '{"hypotheses": ["a"], "weights": {"lm": -1e999999}}', "weights.lm: Input should be a finite"),
    ("/v1/score", '{"texts": ["a"], "nope": 1e400}', "nope: Extra inputs are not permitted"),
    ("/v1/score", '{"texts": [1e400]}', "texts[0]: Input should be a valid string"),
], ids=["scores", "weights", "unknown", "texts"])
def test_a_float_that_overflows_is_a_422_naming_its_field(http, route, body, field):
    r = post(http, route, body.encode())
    assert r.status_code == 422 and r.json()["error"].startswith(field), r.text


@pytest.mark.integration
@pytest.mark.parametrize("length", ["9" * 5000, "0" * 5000 + "2"], ids=["huge", "leading-zeros"])
def test_a_content_length_of_5000_digits_is_not_a_500(server, length):
    """The connection refuses a Content-Length over 2**64; one of many leading zeros reaches the app, which reads
    it without converting 5,000 digits (here: 401, the key comes first)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(f"POST /v1/score HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  f"content-length: {length}\r\n\r\n{{}}".encode())
        reply = read_response(s)
    assert reply is not None and reply[0] in (400, 401), reply


def raw_exchange(port: int, request: bytes) -> tuple[int, dict, bytes] | None:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        return read_response(s)


@pytest.mark.integration
def test_every_http_response_says_nosniff(server, http):
    """Issue 51, item 5: every response tells the browser to take its body as its Content-Type says - the API's,
    the pages', the errors', and the ones the connection writes itself (uvicorn's 400, the 431)."""
    answers = [http.get(path) for path in ("/health", "/ready", "/info", "/metrics", "/", "/docs", "/openapi.json",
                                           "/ui-assets/ui.js", "/nope")]
    answers += [post(http, "/v1/score", b'{"texts": ["a"]}'), post(http, "/v1/score", b'{"texts": []}'),
                httpx.post(f"{server.url}/v1/score", json={"texts": ["a"]}), http.put("/v1/score")]
    assert [r.status_code for r in answers] == [200] * 8 + [404, 200, 422, 401, 405]
    assert [r.headers.get("x-content-type-options") for r in answers] == ["nosniff"] * len(answers)
    bad = raw_exchange(server.port, b"NOT HTTP AT ALL\r\n\r\n")
    big = raw_exchange(server.port, b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n")
    assert bad is not None and big is not None and (bad[0], big[0]) == (400, 431)
    assert bad[1].get("x-content-type-options") == big[1].get("x-content-type-options") == "nosniff"


@pytest.mark.integration
def test_authentication_comes_before_the_body(server):
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        for body in (b'{"texts": [', DEEP[0][1].encode(), '{"texts": ["a"]}'.encode("utf-16")):
            r = post(anon, "/v1/score", body)
            assert r.status_code == 401 and r.json()["error_type"] == "unauthorized", r.text


@pytest.mark.integration
@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "latin-1"])
def test_a_body_that_is_not_utf8_is_a_400(http, encoding):
    r = post(http, "/v1/score", '{"texts": ["café"]}'.encode(encoding))
    assert r.status_code == 400 and r.json()["error_type"] == "http_error"
    assert "not UTF-8" in r.json()["error"]


OVERFLOW = [  # rerank bodies with finite numbers whose totals used to overflow, and the field named
    ({"hypotheses": ["a b", "c"], "weights": {"lm": 1e308}}, "weights.lm"),
    ({"hypotheses": ["a b", "c"], "weights": {"length": 1e308}}, "weights.length"),
    ({"hypotheses": ["a b", "c"], "weights": {"beta": 1.7e308, "prior": "rank"}}, "weights.beta"),
    ({"hypotheses": ["a b", "c"], "scores": [1.7e308, -1.7e308]}, "scores[0]"),
    ({"lists": [{"hypotheses": ["a"]}, {"hypotheses": ["a b", "c"], "scores": [0, -1.7e308]}]}, "lists[1].scores[1]"),
]


@pytest.mark.integration
@pytest.mark.parametrize("body, field", OVERFLOW, ids=[f for _, f in OVERFLOW])
def test_rerank_numbers_out_of_range_are_422_naming_the_field(http, body, field):
    r = http.post("/v1/rerank", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(f"{field}: Input should be")


@pytest.mark.integration
@pytest.mark.parametrize("weights, scores, field", [
    (pb.RerankWeights(lm=1e308), [], "weights.lm"),
    (pb.RerankWeights(length=-1e308), [], "weights.length"),
    (pb.RerankWeights(beta=1.7e308, prior="rank"), [], "weights.beta"),
    (pb.RerankWeights(), [1.7e308, -1.7e308], "lists[0].scores[0]"),
])
def test_grpc_rerank_numbers_out_of_range_are_invalid_argument(channel, weights, scores, field):
    request = pb.RerankRequest(lists=[pb.NBestList(hypotheses=["a b", "c"], scores=scores)], weights=weights)
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.ScoringStub(channel).Rerank(request, metadata=GRPC_AUTH)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(f"{field}: should be between")


@pytest.mark.integration
def test_the_extremes_of_the_range_give_finite_totals(http, channel):
    w, s = MAX_ABS_RERANK_WEIGHT, MAX_ABS_RERANK_SCORE
    body = {"lists": [{"hypotheses": ["a b c", "d"], "scores": [s, -s]}, {"hypotheses": ["a b", "c"]}],
            "weights": {"lm": w, "length": -w, "beta": w, "prior": "rank"}}
    r = http.post("/v1/rerank", json=body)
    assert r.status_code == 200, r.text
    totals = [h["total"] for x in r.json()["results"] for h in x["hyps"]]
    assert all(math.isfinite(t) for t in totals)
    reply = pb_grpc.ScoringStub(channel).Rerank(pb.RerankRequest(
        lists=[pb.NBestList(hypotheses=["a b c", "d"], scores=[-s, s])],
        weights=pb.RerankWeights(lm=-w, length=w)), metadata=GRPC_AUTH)
    assert all(math.isfinite(h.total) for x in reply.results for h in x.hyps)


@pytest.mark.integration
@pytest.mark.parametrize("text", NO_TOKEN, ids=[f"U+{ord(t[0]):04X}" for t in NO_TOKEN])
def test_an_input_with_no_token_is_answered_as_a_blank_one(http, channel, text):
    r = http.post("/v1/score", json={"texts": ["a real text", text]})
    assert r.status_code == 422 and r.json()["error"].startswith("input 1 is empty"), r.text
    r = http.post("/v1/rerank", json={"hypotheses": ["a real one", text]})
    assert r.status_code == 422 and r.json()["error"].startswith("lists[0].hypotheses[1] is empty"), r.text
    r = http.post("/v1/detect", json={"texts": [text]})
    assert r.status_code == 422 and r.json()["error"].startswith("input 0 is empty"), r.text
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.ScoringStub(channel).Score(pb.ScoreRequest(texts=[text]), metadata=GRPC_AUTH)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and e.value.details().startswith("input 0 is empty")


@pytest.mark.integration
def test_the_character_limit_is_in_info_and_openapi_and_enforced(http, channel):
    assert http.get("/info").json()["limits"]["max_input_chars"] == MAX_CHARS
    info = pb_grpc.InfoStub(channel).GetInfo(pb.InfoRequest(), metadata=GRPC_AUTH)
    assert info.limits.max_input_chars == MAX_CHARS
    schemas = http.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["ScoreRequest"]["properties"]["texts"]["items"]["maxLength"] == MAX_CHARS
    assert schemas["ClassifyRequest"]["properties"]["pairs"]["anyOf"][0]["items"]["items"]["maxLength"] == MAX_CHARS
    assert "maxLength" not in schemas["ClassifyRequest"]["properties"]["model"]["anyOf"][0]
    r = http.post("/v1/score", json={"texts": ["ok", "a " * MAX_CHARS], "truncate": True})
    assert r.status_code == 422 and r.json()["error"].startswith(f"input 1 has {2 * MAX_CHARS} characters")
    r = http.post("/v1/score", json={"texts": ["a " * (MAX_CHARS // 2)], "truncate": True})
    assert r.status_code == 200 and r.json()["results"][0]["truncated"]
    r = http.post("/v1/score", json={"texts": ["a " * (MAX_CHARS // 2)]})
    assert r.status_code == 422, r.text
    assert "input 0 has more than the limit of" in r.json()["error"] and "counting stopped at" in r.json()["error"]


@pytest.mark.integration
def test_grpc_health_is_not_serving_for_a_service_without_its_model(channel):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    health = health_pb2_grpc.HealthStub(channel)
    status = {s: health.Check(health_pb2.HealthCheckRequest(service=s)).status
              for s in ("", "electric.v1.Scoring", "electric.v1.Detection", "electric.v1.Info",
                        "electric.v1.Classification")}
    serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
    assert status == {"": serving, "electric.v1.Scoring": serving, "electric.v1.Detection": serving,
                      "electric.v1.Info": serving, "electric.v1.Classification": not_serving}
