"""`electric serve` with Electric's cloze model: /v1/score and /v1/rerank (and gRPC Score, Rerank) give cloze
scores equal to the library's, /info and GetInfo say which method the model serves, /v1/detect refuses."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from server.app import BackgroundServer
from server.settings import Settings
from tests.server.helpers import GRPC_AUTH, KEY

pytest.importorskip("onnx")
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_thread")]

TEXTS = ["show me flights from boston to denver", "show me fights from boston to denver", "a cat"]
LISTS = [{"id": "u0", "hypotheses": ["list all flights to dallas", "list all fights to dallas", "list all flights"],
          "scores": [-1.0, -1.2, -3.0]},
         {"id": "u1", "hypotheses": ["what is the fare", "what is the fair"]}]


@pytest.fixture(scope="module")
def cloze_export(cloze_run, tmp_path_factory):
    from electric.export.exporter import export_model

    out = tmp_path_factory.mktemp("served-cloze") / "onnx"
    export_model(cloze_run / "generator", out, log=lambda _: None)
    return out


@pytest.fixture(scope="module")
def server(cloze_export):
    s = Settings(model=cloze_export, http_port=0, grpc_port=0, api_key=KEY, threads=1, access_log=False)
    with BackgroundServer(s) as srv:
        yield srv


@pytest.fixture(scope="module")
def library(cloze_export):
    from electric.inference.scoring import load_scorer

    return load_scorer(cloze_export, "cloze")


def test_info_says_the_scorer_serves_cloze_scores(http, channel):
    (m,) = http.get("/info").json()["models"]
    assert m["kind"] == "cloze" and m["method"] == "cloze" and m["backend"] == "onnx" and m["labels"] == []
    assert m["training_warnings"] == []  # a model no run of ours warned about
    (g,) = pb_grpc.InfoStub(channel).GetInfo(pb.InfoRequest(), metadata=GRPC_AUTH).models
    assert g.kind == "cloze" and g.method == "cloze"


def test_score_over_http_and_grpc_equals_the_library(http, channel, library, cloze_run):
    from electric.inference.scoring import load_scorer

    want = library.score(TEXTS, per_token=True)
    body = http.post("/v1/score", json={"texts": TEXTS, "per_token": True}).json()
    for r, w in zip(body["results"], want, strict=True):
        assert r["method"] == "cloze" and r["num_tokens"] == w.num_tokens
        assert r["score"] == pytest.approx(w.score, abs=1e-4)
        assert [t["score"] for t in r["tokens"]] == pytest.approx([t.score for t in w.tokens], abs=1e-5)
    torch_scores = [s.score for s in load_scorer(cloze_run, "cloze", backend="torch", device="cpu").score(TEXTS)]
    assert [r["score"] for r in body["results"]] == pytest.approx(torch_scores, abs=1e-3)  # the export's parity
    g = pb_grpc.ScoringStub(channel).Score(pb.ScoreRequest(texts=TEXTS, per_token=True), metadata=GRPC_AUTH)
    assert [r.method for r in g.results] == ["cloze"] * len(TEXTS)
    assert [r.score for r in g.results] == pytest.approx([r["score"] for r in body["results"]], abs=1e-6)
    assert [t.score for t in g.results[0].tokens] == pytest.approx([t["score"] for t in body["results"][0]["tokens"]])


def test_rerank_over_http_and_grpc_uses_cloze_scores(http, channel, library):
    weights = {"lm": 0.5, "length": 0.1, "prior": "rank"}
    body = http.post("/v1/rerank", json={"lists": LISTS, "weights": weights}).json()
    assert body["weights"] == {**weights, "beta": 1.0, "piece": 0.0, "lm_score": "sum", "ngram": 0.0}
    for lst, res in zip(LISTS, body["results"], strict=True):
        lm = [s.score for s in library.score(lst["hypotheses"])]
        prior = lst.get("scores") or [-float(k) for k in range(len(lst["hypotheses"]))]
        total = [p + 0.5 * x + 0.1 * len(h.split()) for p, x, h in zip(prior, lm, lst["hypotheses"], strict=True)]
        assert res["order"] == [int(k) for k in np.argsort(-np.asarray(total), kind="stable")]
        assert [h["lm"] for h in res["hyps"]] == pytest.approx([lm[k] for k in res["order"]], abs=1e-4)
    g = pb_grpc.ScoringStub(channel).Rerank(pb.RerankRequest(
        lists=[pb.NBestList(id=x["id"], hypotheses=x["hypotheses"], scores=x.get("scores", [])) for x in LISTS],
        weights=pb.RerankWeights(**weights)), metadata=GRPC_AUTH)
    assert [list(r.order) for r in g.results] == [r["order"] for r in body["results"]]


def test_detect_needs_a_discriminator(http, channel):
    r = http.post("/v1/detect", json={"texts": TEXTS})
    assert r.status_code == 422 and r.json()["error_type"] == "validation_error"
    assert "cloze model" in r.json()["error"] and "discriminator" in r.json()["error"]
    with pytest.raises(grpc.RpcError) as e:
        pb_grpc.DetectionStub(channel).Detect(pb.DetectRequest(texts=TEXTS), metadata=GRPC_AUTH)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "discriminator" in e.value.details()


def test_what_the_training_run_warned_of_is_in_info_and_the_log(cloze_export, tmp_path, caplog):
    """A model whose run ended with a warning (below chance, worse than its start: training.report.verdict) is
    served with it: /info and GetInfo list it under training_warnings, and the start-up log says it."""
    import json
    import logging
    import shutil

    import httpx

    warned = tmp_path / "warned"
    shutil.copytree(cloze_export, warned)
    manifest = json.loads((warned / "electric.json").read_text())
    manifest["training_health"] = {"steps": 17, "warnings": ["its energy AUC on held-out text is 0.461, below chance"]}
    (warned / "electric.json").write_text(json.dumps(manifest))
    s = Settings(model=warned, http_port=0, grpc_port=0, threads=1, access_log=False)
    with caplog.at_level(logging.WARNING), BackgroundServer(s) as srv:
        (m,) = httpx.get(f"{srv.url}/info").json()["models"]
        with grpc.insecure_channel(srv.grpc_target) as ch:
            (g,) = pb_grpc.InfoStub(ch).GetInfo(pb.InfoRequest()).models
    assert m["training_warnings"] == list(g.training_warnings) == ["its energy AUC on held-out text is 0.461, below chance"]
    assert "the run that made this model ended saying its energy AUC on held-out text is 0.461" in caplog.text
