"""`electric serve` against a real server: uvicorn on a loopback port and a real gRPC client.

One server (ONNX scorer and classifier exported here, torch tagger and regressor, an API key, small
limits) answers every route and RPC and every client mistake; a second one, whose backend can be made
slow or failing, shows batching, overload, timeouts, dropped work and backend errors; short-lived ones
show warm-up/readiness and the graceful drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import grpc
import httpx
import numpy as np
import pytest

from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from server.app import BackgroundServer
from server.settings import Settings
from tests.server.helpers import AUTH, GRPC_AUTH, KEY, assert_close, controlled_loader, metric, wait_until

MAX_TOKENS = 48
MAX_INPUTS = 16


# ---- models ----------------------------------------------------------------------------------------

def _save(model, tokenizer, path):
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def serve_tokenizer(tmp_path_factory):
    """A 2,000-piece WordPiece tokenizer on the first 1,500 lines of one enwiki file (conftest's wiki_sample
    asks for 3,000 lines, more than wiki_00 has)."""
    from itertools import islice

    from conftest import require_shared

    from training.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("serve-tok")
    with open(require_shared("corpus/enwiki/wiki_00"), encoding="utf-8") as f:
        (root / "sample.txt").write_text("".join(islice(f, 1500)), encoding="utf-8")
    train_tokenizer([str(root / "sample.txt")], vocab_size=2000, out=root / "tok")
    return root / "tok"


@pytest.fixture(scope="module")
def models(serve_tokenizer, tmp_path_factory):
    """Random tiny (hidden 64, 2 layers) discriminator, sequence classifier (2 labels), regressor, token tagger; ONNX exports of the
    discriminator and of the classifier."""
    import torch
    from transformers import (
        AutoTokenizer,
        ElectraConfig,
        ElectraForPreTraining,
        ElectraForSequenceClassification,
        ElectraForTokenClassification,
    )

    from electric.export.exporter import export_model

    root = tmp_path_factory.mktemp("serve-models")
    tok = AutoTokenizer.from_pretrained(serve_tokenizer)

    def config(**kw):
        return ElectraConfig(vocab_size=len(tok), embedding_size=32, hidden_size=64, num_hidden_layers=2,
                             num_attention_heads=2, intermediate_size=128, max_position_embeddings=128,
                             pad_token_id=tok.pad_token_id, **kw)

    torch.manual_seed(0)
    disc = _save(ElectraForPreTraining(config()), tok, root / "disc")
    cls = _save(ElectraForSequenceClassification(config(num_labels=2, id2label={0: "negative", 1: "positive"},
                                                        label2id={"negative": 0, "positive": 1})), tok, root / "cls")
    reg = _save(ElectraForSequenceClassification(config(num_labels=1, problem_type="regression")), tok, root / "reg")
    tags = {0: "B-NP", 1: "I-NP", 2: "O"}
    tag = _save(ElectraForTokenClassification(config(num_labels=3, id2label=tags,
                                                     label2id={v: k for k, v in tags.items()})), tok, root / "tag")
    quiet = lambda *_: None  # noqa: E731
    disc_onnx = root / "disc-onnx"
    export_model(disc, disc_onnx, log=quiet)
    cls_onnx = root / "cls-onnx"
    export_model(cls, cls_onnx, log=quiet)
    return {"disc": disc, "disc_onnx": disc_onnx, "cls": cls, "cls_onnx": cls_onnx, "reg": reg, "tag": tag}


@pytest.fixture(scope="module")
def server(models):
    s = Settings(model=models["disc_onnx"], classifiers={"sst2": models["cls_onnx"], "stsb": models["reg"],
                                                         "chunk": models["tag"]},
                 http_port=0, grpc_port=0, api_key=KEY, max_inputs_per_request=MAX_INPUTS,
                 max_tokens_per_input=MAX_TOKENS, max_body_bytes=4096, max_batch_tokens=512, threads=1,
                 access_log=False)
    with BackgroundServer(s) as srv:
        yield srv


@pytest.fixture(scope="module")
def sentences():
    from conftest import require_shared

    data = json.loads(require_shared("nbest/atis_test.whisper5best.json").read_text())
    return data


def direct_scores(model_dir, texts, per_token=True, max_length=MAX_TOKENS, truncate=False):
    """What `electric score` computes, without the server."""
    from electric.inference.backend import load_backend
    from electric.inference.scoring import Scorer

    scorer = Scorer(load_backend(model_dir), truncate=truncate)
    scorer.max_length = max_length
    return [s.to_dict() for s in scorer.score(texts, per_token=per_token)]


# ---- routes and RPCs ---------------------------------------------------------------------------------

def test_health_metrics_docs_are_open_info_needs_the_key(server, models):
    with httpx.Client(base_url=server.url, timeout=10) as anon:
        assert anon.get("/health").json() == {"status": "ok"}
        assert anon.get("/ready").status_code == 200
        assert "electric_requests_total" in anon.get("/metrics").text
        r = anon.get("/info")
        assert r.status_code == 401 and r.json()["error_type"] == "unauthorized"
        api = anon.get("/openapi.json").json()
        assert set(api["paths"]) >= {"/v1/score", "/v1/rerank", "/v1/detect", "/v1/classify", "/health", "/ready",
                                     "/info", "/metrics"}
        assert api["components"]["schemas"]["ScoreRequest"]["examples"]
        assert anon.get("/docs").status_code == 200
    info = httpx.get(f"{server.url}/info", headers=AUTH).json()
    by_name = {m["name"]: m for m in info["models"]}
    assert by_name["scorer"]["backend"] == "onnx" and by_name["scorer"]["kind"] == "discriminator"
    assert by_name["scorer"]["providers"][-1] == "CPUExecutionProvider"
    assert by_name["sst2"]["labels"] == ["negative", "positive"] and by_name["sst2"]["backend"] == "onnx"
    assert by_name["stsb"]["regression"] and by_name["chunk"]["kind"] == "tagger"
    assert info["limits"]["max_tokens_per_input"] == MAX_TOKENS and info["ready"]


def test_score_equals_direct_scoring_on_both_transports(http, channel, models, sentences):
    texts = [u["input"][0] for u in sentences[:6]]
    expected = direct_scores(models["disc_onnx"], texts)
    r = http.post("/v1/score", json={"texts": texts, "per_token": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "scorer"
    assert_close(body["results"], expected)
    tok = body["results"][0]["tokens"][0]
    assert texts[0][tok["start"]:tok["end"]].lower().startswith(tok["token"].lstrip("#")[:1])
    for h in ("x-total-time", "x-queue-time", "x-inference-time", "x-tokenization-time"):
        assert float(r.headers[h]) >= 0
    g, call = pb_grpc.ScoringStub(channel).Score.with_call(pb.ScoreRequest(texts=texts, per_token=True),
                                                           metadata=GRPC_AUTH)
    assert [x.text for x in g.results] == texts
    for x, e in zip(g.results, expected, strict=True):
        assert x.score == pytest.approx(e["score"], abs=1e-4) and x.num_tokens == e["num_tokens"]
        assert [(t.token, t.start, t.end) for t in x.tokens] == [(t["token"], t["start"], t["end"]) for t in e["tokens"]]
    assert {m.key for m in call.trailing_metadata()} >= {"x-queue-time", "x-inference-time", "x-total-time"}


def test_detect_on_both_transports(http, channel, models):
    from electric.inference.backend import load_backend
    from electric.inference.scoring import Scorer

    texts = ["the chef cooked the meal", "flights from boston to denver"]
    expected = [d.to_dict() for d in Scorer(load_backend(models["disc_onnx"])).detect(texts)]
    body = http.post("/v1/detect", json={"texts": texts}).json()
    assert_close(body["results"], expected)
    assert body["results"][0]["words"][1]["word"] == "chef"
    totals = http.post("/v1/detect", json={"texts": texts, "per_token": False}).json()["results"][0]
    assert "tokens" not in totals and totals["score"] == pytest.approx(expected[0]["score"], abs=1e-4)
    g = pb_grpc.DetectionStub(channel).Detect(pb.DetectRequest(texts=texts), metadata=GRPC_AUTH)
    assert [w.word for w in g.results[1].words] == [w["word"] for w in expected[1]["words"]]
    assert g.results[0].tokens[0].prob == pytest.approx(expected[0]["tokens"][0]["prob"], abs=1e-5)


def test_rerank_one_and_many_lists_as_electric_rerank_does(http, channel, models, sentences):
    from electric.evaluation.nbest import NBestList, Weights, rerank_lists

    utts = sentences[:3]
    weights = {"lm": 0.5, "length": 0.2, "beta": 1.0}
    direct = [direct_scores(models["disc_onnx"], u["input"], per_token=False) for u in utts]
    scores = [np.array([d["score"] for d in ds]) for ds in direct]
    pieces = [np.array([d["num_tokens"] for d in ds]) for ds in direct]  # each hypothesis shows what it scored
    lists = [NBestList(u["id"], u["input"], u["am_score"]) for u in utts]
    expected = [r.to_dict() for r in rerank_lists(lists, scores, Weights(**weights), pieces)]
    assert all(h["pieces"] >= h["words"] for e in expected for h in e["hyps"])
    body = http.post("/v1/rerank", json={"lists": [{"id": u["id"], "hypotheses": u["input"], "scores": u["am_score"]}
                                                   for u in utts], "weights": weights}).json()
    assert body["weights"] == {**weights, "prior": "none", "piece": 0.0, "lm_score": "sum", "ngram": 0.0}
    assert_close(body["results"], expected)
    one = http.post("/v1/rerank", json={"hypotheses": utts[0]["input"], "scores": utts[0]["am_score"],
                                        "weights": weights}).json()
    assert one["results"][0]["order"] == expected[0]["order"] and one["results"][0]["utt_id"] == "0"
    # no first-pass scores: no prior unless the request says the order is a first-pass order (prior "rank");
    # unset weights take the server's defaults
    plain = http.post("/v1/rerank", json={"hypotheses": ["list all flights", "list all fights"]}).json()
    assert [h["prior"] for h in sorted(plain["results"][0]["hyps"], key=lambda h: h["rank"])] == [0.0, 0.0]
    assert plain["weights"] == {"lm": 1.0, "length": 0.0, "beta": 1.0, "prior": "none", "piece": 0.0, "lm_score": "sum", "ngram": 0.0}
    ranked = http.post("/v1/rerank", json={"hypotheses": ["list all flights", "list all fights"],
                                           "weights": {"prior": "rank"}}).json()
    assert [h["prior"] for h in sorted(ranked["results"][0]["hyps"], key=lambda h: h["rank"])] == [0.0, -1.0]
    g = pb_grpc.ScoringStub(channel).Rerank(pb.RerankRequest(
        lists=[pb.NBestList(id=u["id"], hypotheses=u["input"], scores=u["am_score"]) for u in utts],
        weights=pb.RerankWeights(**weights)), metadata=GRPC_AUTH)
    assert [list(r.order) for r in g.results] == [e["order"] for e in expected]
    assert [r.utt_id for r in g.results] == [u["id"] for u in utts]
    assert g.results[0].hyps[0].total == pytest.approx(expected[0]["hyps"][0]["total"], abs=1e-4)
    assert [[h.pieces for h in r.hyps] for r in g.results] == [[h["pieces"] for h in e["hyps"]] for e in expected]


def test_rerank_applies_a_reports_weights_as_is_piece_bonus_and_mean_lm_score(http, channel, models, sentences):
    """Every weight the guarded tuning can choose (a piece bonus, the mean LM score) means on the server what it
    means in `electric rerank`: the report's "weights" posted as is give the library's combination."""
    from electric.evaluation.nbest import NBestList, Weights, rerank_lists

    utts = sentences[3:5]
    chosen = {"lm": 0.0, "length": 0.3, "beta": 1.0, "prior": "none", "piece": -0.7, "lm_score": "sum",
              "ngram": 0.0}
    for weights in (chosen, {**chosen, "lm": 2.0, "lm_score": "mean"}):
        direct = [direct_scores(models["disc_onnx"], u["input"], per_token=False) for u in utts]
        column = "score" if weights["lm_score"] == "sum" else "mean"
        scores = [np.array([d[column] for d in ds]) for ds in direct]
        pieces = [np.array([d["num_tokens"] for d in ds], dtype=float) for ds in direct]
        lists = [NBestList(u["id"], u["input"], u["am_score"]) for u in utts]
        expected = [r.to_dict() for r in rerank_lists(lists, scores, Weights.from_dict(weights), pieces)]
        body = http.post("/v1/rerank", json={"lists": [{"id": u["id"], "hypotheses": u["input"],
                                                        "scores": u["am_score"]} for u in utts],
                                             "weights": weights}).json()
        assert body["weights"] == weights
        assert_close(body["results"], expected)
        g = pb_grpc.ScoringStub(channel).Rerank(pb.RerankRequest(
            lists=[pb.NBestList(id=u["id"], hypotheses=u["input"], scores=u["am_score"]) for u in utts],
            weights=pb.RerankWeights(**weights)), metadata=GRPC_AUTH)
        assert [list(r.order) for r in g.results] == [e["order"] for e in expected]
        assert g.weights.piece == weights["piece"] and g.weights.lm_score == weights["lm_score"]
        assert [h.total for h in g.results[0].hyps] == pytest.approx([h["total"] for h in expected[0]["hyps"]],
                                                                     abs=1e-4)
    bad = http.post("/v1/rerank", json={"hypotheses": ["a b"], "weights": {"lm_score": "median"}})
    assert bad.status_code == 422 and "lm_score" in bad.text
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.ScoringStub(channel).Rerank(pb.RerankRequest(lists=[pb.NBestList(hypotheses=["a b"])],
                                                             weights=pb.RerankWeights(lm_score="median")),
                                            metadata=GRPC_AUTH)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "weights.lm_score" in e.value.details()


def test_classify_texts_pairs_regression_and_tags(http, channel, models):
    from electric.batching import pad_rows
    from electric.inference.backend import load_backend
    from electric.inference.encoding import encode

    texts = ["a gripping, beautifully acted film", "a tedious mess"]
    body = http.post("/v1/classify", json={"model": "sst2", "texts": texts}).json()
    be = load_backend(models["cls_onnx"])
    ids, mask = pad_rows([e.input_ids for e in encode(be.tokenizer, texts, 128)], be.tokenizer.pad_token_id)
    logits = be.run(ids, mask)  # (B, 2)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    for res, row in zip(body["results"], p, strict=True):
        assert list(res["probabilities"]) == ["negative", "positive"]
        assert [res["probabilities"]["negative"], res["probabilities"]["positive"]] == pytest.approx(row, abs=1e-5)
        assert res["label"] == ["negative", "positive"][int(row.argmax())]
    pairs = http.post("/v1/classify", json={"model": "sst2", "pairs": [["he said hello", "he greeted them"]]})
    assert pairs.status_code == 200 and sum(pairs.json()["results"][0]["probabilities"].values()) == pytest.approx(1)
    reg = http.post("/v1/classify", json={"model": "stsb", "pairs": [["a man plays", "a man is playing"]]}).json()
    assert reg["results"][0]["label"] is None and isinstance(reg["results"][0]["value"], float)
    tags = http.post("/v1/classify", json={"model": "chunk", "texts": ["the cat sat"]}).json()["results"][0]
    assert [w["token"] for w in tags["words"]] == ["the", "cat", "sat"]
    assert all(w["label"] in ("B-NP", "I-NP", "O") for w in tags["tokens"])
    g = pb_grpc.ClassificationStub(channel).Classify(pb.ClassifyRequest(model="sst2", texts=texts), metadata=GRPC_AUTH)
    assert [r.label for r in g.results] == [r["label"] for r in body["results"]]
    assert g.results[0].probabilities[1].probability == pytest.approx(p[0, 1], abs=1e-5)
    gp = pb_grpc.ClassificationStub(channel).Classify(pb.ClassifyRequest(
        model="stsb", pairs=[pb.TextPair(text="a man plays", text_pair="a man is playing")]), metadata=GRPC_AUTH)
    assert gp.results[0].HasField("value") and gp.results[0].value == pytest.approx(reg["results"][0]["value"], 1e-5)


def test_info_health_and_reflection_over_grpc(channel):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    info = pb_grpc.InfoStub(channel).GetInfo(pb.InfoRequest(), metadata=GRPC_AUTH)
    assert info.ready and {m.name for m in info.models} == {"scorer", "sst2", "stsb", "chunk"}
    assert info.limits.max_inputs_per_request == MAX_INPUTS
    health = health_pb2_grpc.HealthStub(channel)  # open: no key
    for service in ("", "electric.v1.Scoring", "electric.v1.Classification"):
        assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == \
            health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    answer = next(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {s.name for s in answer.list_services_response.service}
    assert names >= {"electric.v1.Scoring", "electric.v1.Detection", "electric.v1.Classification", "electric.v1.Info",
                     "grpc.health.v1.Health"}


# ---- client mistakes -----------------------------------------------------------------------------------

LONG = " ".join(["flights from boston to denver"] * 8)

HTTP_ERRORS = [
    # route, json body (or raw bytes), status, error_type, words the message must contain
    ("/v1/score", {"texts": ["fine", ""]}, 422, "validation_error", "input 1 is empty"),
    ("/v1/score", {"texts": ["fine", "   "]}, 422, "validation_error", "input 1 is empty"),
    ("/v1/score", {"texts": ["fine", 3]}, 422, "validation_error", "texts[1]"),
    ("/v1/score", {"texts": "not a list"}, 422, "validation_error", "texts"),
    ("/v1/score", {"texts": ["a"], "per_token": "yes"}, 422, "validation_error", "per_token"),
    ("/v1/score", {"text": ["a"]}, 422, "validation_error", "texts"),
    ("/v1/score", b'{"texts": ["a"', 422, "validation_error", "not valid JSON"),
    ("/v1/score", {"texts": []}, 422, "validation_error", "texts: List should have at least 1 item"),
    ("/v1/score", {"texts": ["a"] * (MAX_INPUTS + 1)}, 413, "payload_too_large", f"limit is {MAX_INPUTS}"),
    ("/v1/score", {"texts": ["ok", LONG]}, 422, "validation_error", "input 1 has"),
    ("/v1/score", {"texts": ["x" * 5000]}, 413, "payload_too_large", "4096 bytes"),
    ("/v1/detect", {"texts": [LONG]}, 422, "validation_error", "truncate"),
    ("/v1/rerank", {"hypotheses": ["a", "b"], "scores": [1.0]}, 422, "validation_error", "2 hypotheses but 1 scores"),
    ("/v1/rerank", {"lists": [{"hypotheses": ["a", ""]}]}, 422, "validation_error", "lists[0].hypotheses[1] is empty"),
    ("/v1/rerank", {"lists": [{"hypotheses": ["a", LONG]}]}, 422, "validation_error", "lists[0].hypotheses[1] has"),
    ("/v1/rerank", {"hypotheses": ["a"], "lists": [{"hypotheses": ["b"]}]}, 422, "validation_error", "either"),
    ("/v1/classify", {"model": "nope", "texts": ["a"]}, 422, "validation_error", "unknown classifier 'nope'"),
    ("/v1/classify", {"texts": ["a"]}, 422, "validation_error", "say which classifier"),
    ("/v1/classify", {"model": "sst2", "texts": ["a"], "pairs": [["a", "b"]]}, 422, "validation_error", "either"),
    ("/v1/classify", {"model": "sst2", "pairs": [["a"]]}, 422, "validation_error", "pairs[0]"),
    ("/v1/classify", {"model": "sst2", "pairs": [["a", ""]]}, 422, "validation_error", "pairs[0][1] is empty"),
    ("/v1/classify", {"model": "chunk", "pairs": [["a", "b"]]}, 422, "validation_error", "send \"texts\""),
    ("/v1/nope", {}, 404, "not_found", ""),
]


@pytest.mark.parametrize("route, body, status, error_type, words", HTTP_ERRORS,
                         ids=[f"{r}-{t}-{i}" for i, (r, _, _, t, _) in enumerate(HTTP_ERRORS)])
def test_client_mistakes_are_typed_errors_never_500(http, route, body, status, error_type, words):
    if isinstance(body, bytes):
        r = http.post(route, content=body, headers={"content-type": "application/json"})
    else:
        r = http.post(route, json=body)
    assert r.status_code == status, r.text
    err = r.json()
    assert set(err) == {"error", "error_type"} and err["error_type"] == error_type
    assert words in err["error"] and "Traceback" not in err["error"]


def test_method_not_allowed_wrong_key_and_truncation(server, http):
    r = http.get("/v1/score")
    assert r.status_code == 405 and r.json()["error_type"] == "method_not_allowed"
    r = httpx.post(f"{server.url}/v1/score", json={"texts": ["a"]}, headers={"authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error_type"] == "unauthorized"
    r = httpx.post(f"{server.url}/v1/score", json={"texts": ["a"]})
    assert r.status_code == 401
    r = http.post("/v1/score", json={"texts": [LONG], "truncate": True})
    assert r.status_code == 200 and r.json()["results"][0]["truncated"] is True
    assert r.json()["results"][0]["num_tokens"] == MAX_TOKENS - 2
    r = http.post("/v1/score", content=b'{"texts": ["a"]}', headers={"content-type": "text/plain"})
    assert r.status_code == 422 and "Content-Type: application/json" in r.json()["error"]


@pytest.mark.parametrize("call, request_, code, words", [
    ("Score", pb.ScoreRequest(texts=["ok", ""]), grpc.StatusCode.INVALID_ARGUMENT, "input 1 is empty"),
    ("Score", pb.ScoreRequest(texts=[LONG]), grpc.StatusCode.INVALID_ARGUMENT, "input 0 has"),
    ("Score", pb.ScoreRequest(texts=["a"] * (MAX_INPUTS + 1)), grpc.StatusCode.INVALID_ARGUMENT, "limit is"),
    ("Score", pb.ScoreRequest(), grpc.StatusCode.INVALID_ARGUMENT, "no texts"),
    ("Classify", pb.ClassifyRequest(model="nope", texts=["a"]), grpc.StatusCode.INVALID_ARGUMENT, "unknown classifier"),
    ("Rerank", pb.RerankRequest(lists=[pb.NBestList(hypotheses=["a"], scores=[1, 2])]),
     grpc.StatusCode.INVALID_ARGUMENT, "1 hypotheses but 2 scores"),
    ("Score", pb.ScoreRequest(texts=["x" * 5000]), grpc.StatusCode.RESOURCE_EXHAUSTED, ""),  # over max_body_bytes
])
def test_grpc_client_mistakes(channel, call, request_, code, words):
    stub = {"Score": pb_grpc.ScoringStub, "Rerank": pb_grpc.ScoringStub,
            "Classify": pb_grpc.ClassificationStub}[call](channel)
    with pytest.raises(grpc.RpcError) as e:
        getattr(stub, call)(request_, metadata=GRPC_AUTH)
    assert e.value.code() == code and words in e.value.details()
    if words:
        assert dict(e.value.trailing_metadata())["error-type"] in ("validation_error", "payload_too_large")


def test_grpc_needs_the_key(channel):
    stub = pb_grpc.ScoringStub(channel)
    for md in ((), (("authorization", "Bearer nope"),)):
        with pytest.raises(grpc.RpcError) as e:
            stub.Score(pb.ScoreRequest(texts=["a"]), metadata=md)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_concurrent_clients_get_their_own_results(server, models, sentences):
    texts = [u["input"][k] for u in sentences[:60] for k in (0, 3) if len(u["input"][k].split()) <= 12][:40]
    expected = {t: d["score"] for t, d in zip(texts, direct_scores(models["disc_onnx"], texts, False), strict=True)}

    async def main():
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=30) as c, \
                grpc.aio.insecure_channel(server.grpc_target) as ch:
            stub = pb_grpc.ScoringStub(ch)

            async def via_http(t):
                r = await c.post("/v1/score", json={"texts": [t]})
                assert r.status_code == 200, r.text
                return t, r.json()["results"][0]

            async def via_grpc(t):
                r = await stub.Score(pb.ScoreRequest(texts=[t]), metadata=GRPC_AUTH)
                return t, {"text": r.results[0].text, "score": r.results[0].score}

            return await asyncio.gather(*(via_http(t) if i % 2 else via_grpc(t) for i, t in enumerate(texts)))

    for sent, got in asyncio.run(main()):
        assert got["text"] == sent
        assert got["score"] == pytest.approx(expected[sent], abs=1e-4)


def test_metrics_count_routes_failures_and_batches(server, http):
    http.post("/v1/score", json={"texts": ["one", "two"]})
    http.post("/v1/score", json={"texts": [""]})
    text = httpx.get(f"{server.url}/metrics").text
    assert metric(text, "electric_requests_total", route="/v1/score", transport="http") >= 2
    assert metric(text, "electric_request_failures_total", route="/v1/score", transport="http",
                  error_type="validation_error") >= 1
    assert metric(text, "electric_request_failures_total", route="/electric.v1.Scoring/Score", transport="grpc",
                  error_type="unauthorized") >= 0
    assert metric(text, "electric_batch_size_count", model="scorer") >= 1
    assert metric(text, "electric_inference_duration_seconds_count", model="scorer") >= 1
    assert metric(text, "electric_queue_duration_seconds_count", model="scorer") >= 1
    assert metric(text, "electric_request_duration_seconds_count", route="/v1/score", transport="http") >= 2
    assert metric(text, "electric_ready") == 1


def test_warmup_stays_out_of_the_request_metrics(models):
    """The start-up warm-up runs batches of its own: /metrics counts them as electric_warmup_batches, not as
    traffic (input tokens, batches, queue and inference time), so one request of n tokens shows as n."""
    from server.engine import Engine
    from server.prometheus import Metrics

    async def main():
        m = Metrics()
        engine = Engine(Settings(model=models["disc_onnx"], grpc_port=-1, threads=1, access_log=False), m)
        await engine.start()
        try:
            before = m.render().decode()
            answer = await engine.score(["list all flights to dallas"])
            padded = engine.models["scorer"].model.backend.padded_length(answer.timing.tokens)
            return before, m.render().decode(), answer, padded
        finally:
            await engine.close(5)

    before, after, answer, padded = asyncio.run(main())
    assert metric(before, "electric_warmup_batches_total", model="scorer") >= 2  # score and detect, two sizes
    for name in ("electric_input_tokens_total", "electric_batch_size_count", "electric_inference_duration_seconds_count",
                 "electric_queue_duration_seconds_count"):
        assert metric(before, name, model="scorer") == 0, name
    assert metric(after, "electric_input_tokens_total", model="scorer") == answer.timing.tokens > 0
    assert metric(after, "electric_batch_size_count", model="scorer") == 1
    assert "electric_batch_shapes_total{" not in before
    assert metric(after, "electric_batch_shapes_total", model="scorer", size="1", length=str(padded)) == 1
    assert metric(after, "electric_warmup_batches_total", model="scorer") == \
        metric(before, "electric_warmup_batches_total", model="scorer")


@pytest.mark.parametrize("route, body", [
    ("/v1/score", {"texts": ["list all flights", "to dallas"], "per_token": True}),
    ("/v1/detect", {"texts": ["list all flights"]}),
    ("/v1/rerank", {"hypotheses": ["list all flights", "list all fights"], "weights": {"prior": "rank"}}),
    ("/v1/classify", {"model": "sst2", "pairs": [["list all flights", "to dallas"]]}),
])
def test_every_post_to_a_scoring_route_is_answered_alike(server, http, route, body):
    """Every POST to a scoring route, whatever its JSON media type and however it is chunked, is answered by its
    endpoint in server.http.ROUTES, through HttpRouter (FastAPI has no route for it). Same answers, all counted
    under the route."""
    from server.http_middleware import HttpRouter

    app = server.app.middleware_stack
    while not isinstance(app, HttpRouter):
        app = app.app
    assert set(app.paths[route]) == {"POST"}
    assert route not in {getattr(r, "path", None) for r in server.app.routes}
    before = metric(httpx.get(f"{server.url}/metrics").text, "electric_requests_total", route=route, transport="http")
    data = json.dumps(body).encode()
    whole = http.post(route, content=data, headers={"content-type": "application/json"})
    chunked = http.post(route, content=iter([data[:7], data[7:]]), headers={"content-type": "application/json"})
    plus = http.post(route, content=data, headers={"content-type": "application/vnd.electric+json"})
    replies = [whole, chunked, plus]
    assert [r.status_code for r in replies] == [200] * 3, [r.text for r in replies]
    assert whole.json() == chunked.json() == plus.json()
    assert all(float(r.headers["x-inference-time"]) > 0 and int(r.headers["x-inputs"]) >= 1 for r in replies)
    bad = httpx.post(f"{server.url}{route}", content=data,
                     headers={"content-type": "application/json", "authorization": "Bearer no"})
    assert bad.status_code == 401 and bad.json() == {
        "error": "missing or wrong API key: send \"Authorization: Bearer KEY\"", "error_type": "unauthorized"}
    after = metric(httpx.get(f"{server.url}/metrics").text, "electric_requests_total", route=route, transport="http")
    assert after - before == 4


# ---- a backend that can be slowed down or broken -------------------------------------------------------------

def queued(srv, model: str = "scorer") -> int:
    """Inputs tokenised and waiting in the model's queue for a batch."""
    return len(srv.engine.models[model].pending)


@pytest.fixture(scope="module")
def slow(models):
    s = Settings(model=models["disc_onnx"], http_port=0, grpc_port=0, max_concurrent_requests=6,
                 request_timeout_s=1.5, max_batch_tokens=1024, threads=1, access_log=False)
    with BackgroundServer(s, loader=controlled_loader()) as srv:
        yield srv


@pytest.fixture
def backend(slow):
    b = slow.engine.models["scorer"].model.backend
    yield b
    b.fail = False
    b.release()
    slow.engine.batcher.worker.submit(lambda: None).result(30)  # let the worker finish what a test left running


def test_batching_really_batches_under_concurrency(slow, backend, models):
    texts = [f"show me flights number {i} from boston" for i in range(6)]
    expected = direct_scores(models["disc_onnx"], texts, per_token=False)
    before = len(backend.batches)
    backend.hold()

    async def main():
        async with httpx.AsyncClient(base_url=slow.url, timeout=30) as c:
            replies = asyncio.gather(*(c.post("/v1/score", json={"texts": [t]}) for t in texts))
            # the first batch is held in the model while the other requests queue up behind it
            while not (backend.running.is_set() and
                       sum(b[0] for b in backend.batches[before:]) + queued(slow) == len(texts)):
                await asyncio.sleep(0.005)
            backend.release()
            return await replies

    replies = asyncio.run(main())
    assert [r.status_code for r in replies] == [200] * 6
    for r, e in zip(replies, expected, strict=True):
        assert r.json()["results"][0]["score"] == pytest.approx(e["score"], abs=1e-4)
    sizes = [shape[0] for shape in backend.batches[before:]]
    assert sum(sizes) == 6 and max(sizes) > 1, sizes  # 6 requests in fewer than 6 forward passes
    lengths = [shape[1] for shape in backend.batches[before:]]
    assert all(t == backend.padded_length(t) and t % 8 == 0 for t in lengths), lengths  # padded once, to the bucket
    text = httpx.get(f"{slow.url}/metrics").text
    count = metric(text, "electric_batch_size_count", model="scorer")
    ones = metric(text, "electric_batch_size_bucket", model="scorer", le="1.0")
    assert count > ones  # the batch-size histogram saw batches larger than 1


def test_overload_is_429_and_resource_exhausted(slow, backend):
    backend.hold()  # the admitted requests stay in flight until the over-limit ones are answered

    async def main():
        async with httpx.AsyncClient(base_url=slow.url, timeout=30) as c, \
                grpc.aio.insecure_channel(slow.grpc_target) as ch:
            admitted = [asyncio.ensure_future(c.post("/v1/score", json={"texts": [f"text {i}"]})) for i in range(6)]
            while slow.engine.in_flight < 6:  # the limit: 6 requests in flight
                await asyncio.sleep(0.005)
            over = await c.post("/v1/score", json={"texts": ["one too many"]})
            gauges = (await c.get("/metrics")).text  # read when scraped
            try:
                await pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=["one too many"]))
                code = "OK"
            except grpc.aio.AioRpcError as e:
                code = e.code().name
            backend.release()
            return await asyncio.gather(*admitted), over, code, gauges

    admitted, over, code, gauges = asyncio.run(main())
    assert [r.status_code for r in admitted] == [200] * 6
    assert metric(gauges, "electric_requests_in_flight") == 6
    idle = httpx.get(f"{slow.url}/metrics").text
    assert metric(idle, "electric_requests_in_flight") == 0 and 'electric_queue_inputs{model="scorer"} 0.0' in idle
    assert over.status_code == 429 and over.json()["error_type"] == "overloaded"
    assert code == "RESOURCE_EXHAUSTED"


def test_backend_failure_is_500_without_details_then_recovers(slow, backend):
    backend.fail = True
    r = httpx.post(f"{slow.url}/v1/score", json={"texts": ["hello"]})
    assert r.status_code == 500 and r.json()["error_type"] == "backend_error"
    assert "secret" not in r.text and "Traceback" not in r.text
    with grpc.insecure_channel(slow.grpc_target) as ch, pytest.raises(grpc.RpcError) as e:
        pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=["hello"]))
    assert e.value.code() == grpc.StatusCode.INTERNAL and "secret" not in e.value.details()
    backend.fail = False
    assert httpx.post(f"{slow.url}/v1/score", json={"texts": ["hello"]}).status_code == 200


@pytest.mark.integration
def test_timeout_is_504(slow, backend):
    backend.hold()  # the batch outlasts request_timeout_s (1.5 s) however fast the machine is
    r = httpx.post(f"{slow.url}/v1/score", json={"texts": ["hello"]}, timeout=30)
    assert r.status_code == 504 and r.json()["error_type"] == "timeout"


def test_work_of_clients_that_went_away_is_dropped(slow, backend):
    def dropped() -> float:
        return metric(httpx.get(f"{slow.url}/metrics").text, "electric_dropped_inputs_total", model="scorer")

    base = dropped()
    n0 = len(backend.batches)
    backend.hold()

    async def main():
        async with httpx.AsyncClient(base_url=slow.url, timeout=30) as c, \
                grpc.aio.insecure_channel(slow.grpc_target) as ch:
            busy = asyncio.ensure_future(c.post("/v1/score", json={"texts": ["busy"]}))
            while not backend.running.is_set():  # the worker is busy with "busy" until released
                await asyncio.sleep(0.005)
            gone = asyncio.ensure_future(c.post("/v1/score", json={"texts": ["gone", "away"]}))
            while queued(slow) < 2:  # queued behind "busy" ...
                await asyncio.sleep(0.005)
            gone.cancel()  # ... when its client gives up and disconnects
            also_gone = pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=["also gone"]))
            while queued(slow) < 3:
                await asyncio.sleep(0.005)
            also_gone.cancel()
            while slow.engine.in_flight > 1:  # the server saw both clients go: only "busy" is left
                await asyncio.sleep(0.005)
            backend.release()
            return await busy, (await asyncio.gather(gone, return_exceptions=True))[0], also_gone.cancelled()

    busy, gone, grpc_cancelled = asyncio.run(main())
    assert busy.status_code == 200 and isinstance(gone, asyncio.CancelledError) and grpc_cancelled
    wait_until(lambda: dropped() == base + 3, "the dropped inputs to be counted")  # at the next batch round
    assert [b[0] for b in backend.batches[n0:]] == [1]  # "gone", "away" and "also gone" never reached the model


# ---- lifecycle -------------------------------------------------------------------------------------------

def test_not_ready_until_loaded_and_warm(models):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    gate = threading.Event()
    s = Settings(model=models["disc_onnx"], http_port=0, grpc_port=0, access_log=False, threads=1)
    srv = BackgroundServer(s, loader=controlled_loader(gate), wait_ready=False).start()
    try:
        assert httpx.get(f"{srv.url}/health").status_code == 200
        r = httpx.get(f"{srv.url}/ready")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        r = httpx.post(f"{srv.url}/v1/score", json={"texts": ["a"]})
        assert r.status_code == 503 and r.json()["error_type"] == "not_ready"
        with grpc.insecure_channel(srv.grpc_target) as ch:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=["a"]))
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            health = health_pb2_grpc.HealthStub(ch)
            assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.NOT_SERVING
            gate.set()
            wait_until(lambda: httpx.get(f"{srv.url}/ready").status_code == 200, "the server to be ready")
            assert srv.engine.models["scorer"].model.backend.batches  # warm-up ran batches before ready
            assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
    finally:
        gate.set()
        srv.stop()


@pytest.mark.integration
def test_a_model_that_does_not_load_fails_the_server(tmp_path):
    s = Settings(model=tmp_path / "missing", http_port=0, grpc_port=-1, access_log=False)
    srv = BackgroundServer(s)
    with pytest.raises(RuntimeError, match="does not exist"):
        srv.start()
    srv.stop()


@pytest.mark.integration
def test_shutdown_drains_in_flight_requests(models):
    s = Settings(model=models["disc_onnx"], http_port=0, grpc_port=0, access_log=False, threads=1,
                 shutdown_grace_s=20)
    srv = BackgroundServer(s, loader=controlled_loader()).start()
    backend = srv.engine.models["scorer"].model.backend
    backend.hold()  # the 4 requests stay in flight together until the shutdown has begun
    url, target = srv.url, srv.grpc_target
    results: dict = {}

    def http_call(i):
        results[f"http{i}"] = httpx.post(f"{url}/v1/score", json={"texts": [f"request {i}"]}, timeout=30).status_code

    def grpc_call():
        with grpc.insecure_channel(target) as ch:
            r = pb_grpc.ScoringStub(ch).Score(pb.ScoreRequest(texts=["grpc request"]), timeout=30)
            results["grpc"] = r.results[0].text

    threads = [threading.Thread(target=http_call, args=(i,)) for i in range(3)] + [threading.Thread(target=grpc_call)]
    for t in threads:
        t.start()
    wait_until(lambda: srv.engine.in_flight == 4, "4 requests in flight")
    stopper = threading.Thread(target=srv.stop)
    stopper.start()
    wait_until(lambda: srv.engine.lifecycle.draining, "the shutdown to begin")  # new work is refused from now on ...
    with contextlib.suppress(httpx.ConnectError):  # refused: 503 while the socket is open, then no connection
        assert httpx.post(f"{url}/v1/score", json={"texts": ["late"]}, timeout=5).status_code == 503
    backend.release()
    for t in threads:
        t.join(30)
    stopper.join(30)
    assert results == {"http0": 200, "http1": 200, "http2": 200, "grpc": "grpc request"}  # ... in-flight work finished
    assert not stopper.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", timeout=2)
