"""Issue 30, item 8: what docs/server.md and /openapi.json promise is what the server does.

(a) JSON bodies are UTF-8, with or without a byte-order mark; UTF-16 and UTF-32 (with or without one) and other
encodings are a 400 naming the problem. (b) A body valid against /openapi.json's request schemas is answered 200,
and one it refuses (an empty or blank text, both forms at once, neither) is refused by the server too. (c) A pair
with a side the tokenizer keeps nothing of is a 422 naming that side, as the same text alone is. (d) With a key, an
oversized Content-Length is a 413 before the key is checked, as documented; any other refusal comes after it (401).
"""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx
import pytest
from conftest import save_random_electra
from jsonschema import Draft202012Validator

from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from server.app import BackgroundServer
from server.settings import Settings
from tests.server.helpers import AUTH, GRPC_AUTH, KEY

pytestmark = pytest.mark.usefixtures("one_thread")

DOCS = Path(__file__).resolve().parents[2] / "docs" / "server.md"
BODY = '{"texts": ["café au lait", "the cat sat"]}'


@pytest.fixture(scope="module")
def server(disc_dir, tokenizer_dir, tmp_path_factory):
    classifier = save_random_electra("ElectraForSequenceClassification", tokenizer_dir,
                                     tmp_path_factory.mktemp("promises") / "cls")
    s = Settings(model=disc_dir, classifiers={"cls": classifier}, http_port=0, grpc_port=0, api_key=KEY, threads=1,
                 warmup=False, access_log=False)
    with BackgroundServer(s) as srv:
        yield srv


def post(http: httpx.Client, route: str, body: bytes, ctype: str = "application/json") -> httpx.Response:
    return http.post(route, content=body, headers={"content-type": ctype})


# ---- (a) the body's encoding --------------------------------------------------------------------------

CTYPES = ["application/json", "application/vnd.electric+json"]  # both JSON, read by one rule


@pytest.mark.parametrize("ctype", CTYPES, ids=["json", "plus-json"])
def test_utf8_with_or_without_a_byte_order_mark_is_read(http, ctype):
    plain = post(http, "/v1/score", BODY.encode("utf-8"), ctype)
    bom = post(http, "/v1/score", BODY.encode("utf-8-sig"), ctype)
    assert plain.status_code == bom.status_code == 200, bom.text
    assert bom.json() == plain.json()
    bad = post(http, "/v1/score", '{"texts": 1}'.encode("utf-8-sig"), ctype)  # read, then refused for what it says
    assert bad.status_code == 422 and "texts: Input should be a valid list" in bad.json()["error"], bad.text


@pytest.mark.parametrize("ctype", CTYPES, ids=["json", "plus-json"])
@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"])
def test_utf16_and_utf32_are_a_400_naming_the_encoding(http, encoding, ctype):
    r = post(http, "/v1/score", BODY.encode(encoding), ctype)
    assert r.status_code == 400, r.text
    named = encoding.upper()  # UTF-16 / UTF-32: with a BOM; UTF-16-LE ...: without one
    assert r.json() == {"error": f"the body is {named}, not UTF-8; send JSON in UTF-8", "error_type": "http_error"}


@pytest.mark.parametrize("ctype", CTYPES, ids=["json", "plus-json"])
def test_bytes_that_are_not_utf8_are_a_400_naming_the_byte(http, ctype):
    r = post(http, "/v1/score", BODY.encode("latin-1"), ctype)
    assert r.status_code == 400 and r.json()["error"].startswith("the body is not UTF-8 (byte 15: b'\\xe9')"), r.text


def test_the_docs_say_what_the_code_does():
    text = " ".join(DOCS.read_text().split())
    assert "with or without a byte-order mark" in text and "UTF-16 and UTF-32 are refused" in text


# ---- (b) the schema says what is accepted -------------------------------------------------------------

SCHEMA_CASES = [  # route, request schema, body: the schema and the server must agree on each
    ("/v1/score", "ScoreRequest", {"texts": ["a b", " padded "]}),
    ("/v1/score", "ScoreRequest", {"texts": ["a", ""]}),
    ("/v1/score", "ScoreRequest", {"texts": ["   "]}),
    ("/v1/score", "ScoreRequest", {"texts": ["\u200b"]}),
    ("/v1/score", "ScoreRequest", {"texts": ["\ufeff\u00ad"]}),
    ("/v1/score", "ScoreRequest", {"texts": ["\x1c"]}),
    ("/v1/detect", "DetectRequest", {"texts": [""]}),
    ("/v1/detect", "DetectRequest", {"texts": ["\u200bok"]}),
    ("/v1/rerank", "RerankRequest", {"hypotheses": ["a", "b"]}),
    ("/v1/rerank", "RerankRequest", {"hypotheses": ["a", "b"], "lists": None}),
    ("/v1/rerank", "RerankRequest", {"hypotheses": ["a", ""]}),
    ("/v1/rerank", "RerankRequest", {"lists": [{"hypotheses": ["a"]}]}),
    ("/v1/rerank", "RerankRequest", {"lists": [{"hypotheses": ["a"]}], "scores": None}),
    ("/v1/rerank", "RerankRequest", {"lists": [{"hypotheses": ["a", " "]}]}),
    ("/v1/rerank", "RerankRequest", {"hypotheses": ["a"], "lists": [{"hypotheses": ["a"]}]}),
    ("/v1/rerank", "RerankRequest", {"lists": [{"hypotheses": ["a"]}], "scores": [1.0]}),
    ("/v1/rerank", "RerankRequest", {"hypotheses": ["a"], "lists": [{"hypotheses": ["a"]}], "scores": [1.0]}),
    ("/v1/rerank", "RerankRequest", {}),
    ("/v1/classify", "ClassifyRequest", {"texts": ["a"]}),
    ("/v1/classify", "ClassifyRequest", {"pairs": [["a", "b"]]}),
    ("/v1/classify", "ClassifyRequest", {"texts": None, "pairs": [["a", "b"]]}),
    ("/v1/classify", "ClassifyRequest", {"texts": ["a"], "pairs": [["a", "b"]]}),
    ("/v1/classify", "ClassifyRequest", {"texts": None, "pairs": None}),
    ("/v1/classify", "ClassifyRequest", {}),
    ("/v1/classify", "ClassifyRequest", {"pairs": [["a", ""]]}),
    ("/v1/classify", "ClassifyRequest", {"pairs": [["a", "\u200b"]]}),
]


@pytest.fixture(scope="module")
def openapi(http) -> dict:
    return http.get("/openapi.json").json()


@pytest.mark.parametrize("route, schema, body", SCHEMA_CASES, ids=[f"{r[4:]}-{i}" for i, (r, _, _) in
                                                                   enumerate(SCHEMA_CASES)])
def test_a_body_is_schema_valid_exactly_when_the_server_accepts_it(http, openapi, route, schema, body):
    valid = Draft202012Validator({**openapi, "$ref": f"#/components/schemas/{schema}"}).is_valid(body)
    r = http.post(route, json=body)
    assert r.status_code in (200, 422), r.text
    assert valid == (r.status_code == 200), f"schema says {'valid' if valid else 'invalid'}, the server {r.text}"


def test_the_schema_spells_both_forms_as_one_of(openapi):
    schemas = openapi["components"]["schemas"]
    assert [b["required"] for b in schemas["ClassifyRequest"]["oneOf"]] == [["texts"], ["pairs"]]
    assert [b["required"] for b in schemas["RerankRequest"]["oneOf"]] == [["lists"], ["hypotheses"]]
    text = schemas["ScoreRequest"]["properties"]["texts"]["items"]
    assert text["minLength"] == 1 and "pattern" in text


# ---- (c) a pair with a blank side ---------------------------------------------------------------------

@pytest.mark.parametrize("side", [0, 1])
def test_a_pair_with_a_side_of_no_token_is_a_422_naming_it(http, channel, side):
    alone = http.post("/v1/classify", json={"texts": ["\u200b"]})
    assert alone.status_code == 422 and alone.json()["error"].startswith("input 0 is empty once tokenised")
    pair = ["a real sentence", "a real sentence"]
    pair[side] = "\u200b\u200c"
    r = http.post("/v1/classify", json={"pairs": [["one", "two"], pair]})
    assert r.status_code == 422, r.text
    assert r.json()["error"].startswith(f"pairs[1][{side}] is empty once tokenised")
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.ClassificationStub(channel).Classify(
            pb.ClassifyRequest(pairs=[pb.TextPair(text=pair[0], text_pair=pair[1])]), metadata=GRPC_AUTH)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith(f"pairs[0][{side}] is empty once tokenised")


# ---- (d) 413 and 401 ----------------------------------------------------------------------------------

def test_an_oversized_content_length_is_413_before_the_key_as_documented(server):
    limit = server.settings.max_body_bytes
    with httpx.Client(base_url=server.url, timeout=30) as anon:
        big = anon.post("/v1/score", content=b"x" * (limit + 1), headers={"content-type": "application/json"})
        assert big.status_code == 413 and big.json()["error_type"] == "payload_too_large"
        small = anon.post("/v1/score", json={"texts": [""]})
        assert small.status_code == 401 and small.json()["error_type"] == "unauthorized"
        utf16 = anon.post("/v1/score", content=BODY.encode("utf-16"), headers={"content-type": "application/json"})
        assert utf16.status_code == 401
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as client:
        assert client.post("/v1/score", content=b"x" * (limit + 1)).status_code == 413
    assert "an oversized `Content-Length` is answered 413 before the key is checked" in " ".join(DOCS.read_text().split())
