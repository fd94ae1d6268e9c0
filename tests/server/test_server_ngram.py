"""A model directory that carries an n-gram LM (ARPA, as `electric adapt` writes it): /v1/rerank and gRPC Rerank
weigh the n-gram's score of each hypothesis, equal to electric.evaluation.ngram's; /v1/score returns it on request;
/info says which parts the served combination has; an ARPA file that does not parse, or that is missing, stops
`electric serve` in one line with status 2."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import require_shared

from electric.evaluation.arpa import ArpaLM, NgramError
from electric.evaluation.ngram import KneserNeyLM
from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from server.app import BackgroundServer
from server.settings import Settings
from tests.server.helpers import GRPC_AUTH, KEY

pytest.importorskip("onnx")
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("one_thread")]

WEIGHTS = {"lm": 0.01, "length": 0.2, "beta": 1.0, "prior": "none", "piece": 0.0, "lm_score": "sum", "ngram": 0.5}
LISTS = [{"id": "u0", "hypotheses": ["show me flights from boston to denver", "show me fights from boston to denver",
                                     "show me flights from boston two denver"], "scores": [-0.30, -0.29, -0.31]},
         {"id": "u1", "hypotheses": ["what is the fare to dallas", "what is the fair to dallas"]}]


@pytest.fixture(scope="module")
def lm() -> KneserNeyLM:
    utts = json.loads(require_shared("nbest/atis_train.whisper5best.json").read_text())
    return KneserNeyLM.train([u["output"] for u in utts[:2000]], order=3)


@pytest.fixture(scope="module")
def model_dir(cloze_run, lm, tmp_path_factory):
    from electric.export.exporter import export_model
    from electric.export.manifest import add_serving_defaults

    out = tmp_path_factory.mktemp("served-ngram") / "model"
    export_model(cloze_run / "generator", out, log=lambda _: None)
    lm.write_arpa(out / "ngram.arpa")
    add_serving_defaults(out, rerank_weights=WEIGHTS, ngram="ngram.arpa")
    return out


@pytest.fixture(scope="module")
def server(model_dir):
    s = Settings(model=model_dir, http_port=0, grpc_port=0, api_key=KEY, threads=1, access_log=False)
    with BackgroundServer(s) as srv:
        yield srv


def test_the_arpa_file_gives_the_trainers_scores(lm, model_dir):
    arpa = ArpaLM.read(model_dir / "ngram.arpa")
    texts = [h for x in LISTS for h in x["hypotheses"]] + ["zebra quokka", "boston", "to to to to"]
    for t in texts:
        assert arpa.score(t).score == pytest.approx(lm.score(t).score, abs=1e-4)
        assert arpa.score(t).num_tokens == lm.score(t).num_tokens


def test_rerank_weighs_the_ngram_as_the_library_scores_it(http, channel, lm):
    body = http.post("/v1/rerank", json={"lists": LISTS}).json()
    assert body["weights"] == WEIGHTS  # the model directory's own
    for res in body["results"]:
        for h in res["hyps"]:
            assert h["ngram"] == pytest.approx(lm.score(h["text"]).score, abs=1e-4)
            want = h["prior"] + 0.01 * h["lm"] + 0.2 * h["words"] + 0.5 * h["ngram"]
            assert h["total"] == pytest.approx(want, abs=1e-6)
        assert [h["total"] for h in res["hyps"]] == sorted((h["total"] for h in res["hyps"]), reverse=True)
    # "fights" is more likely to the first pass, the n-gram turns it round
    assert body["results"][0]["best"] == "show me flights from boston to denver"
    without = http.post("/v1/rerank", json={"lists": LISTS, "weights": {"ngram": 0.0}}).json()
    assert "ngram" not in without["results"][0]["hyps"][0]  # not weighed, not scored
    g = pb_grpc.ScoringStub(channel).Rerank(pb.RerankRequest(
        lists=[pb.NBestList(id=x["id"], hypotheses=x["hypotheses"], scores=x.get("scores", [])) for x in LISTS]),
        metadata=GRPC_AUTH)
    assert [list(r.order) for r in g.results] == [r["order"] for r in body["results"]]
    assert [h.ngram for h in g.results[0].hyps] == pytest.approx([h["ngram"] for h in body["results"][0]["hyps"]])
    assert g.weights.ngram == 0.5


def test_score_returns_the_ngram_on_request(http, channel, lm):
    texts = ["show me flights to denver", "list fares"]
    body = http.post("/v1/score", json={"texts": texts, "ngram": True}).json()
    assert [r["ngram"] for r in body["results"]] == pytest.approx([lm.score(t).score for t in texts], abs=1e-4)
    assert "ngram" not in http.post("/v1/score", json={"texts": texts}).json()["results"][0]
    g = pb_grpc.ScoringStub(channel).Score(pb.ScoreRequest(texts=texts, ngram=True), metadata=GRPC_AUTH)
    assert [r.ngram for r in g.results] == pytest.approx([r["ngram"] for r in body["results"]])


def test_info_says_what_the_served_combination_has(http, channel):
    info = http.get("/info").json()
    assert info["rerank_parts"] == ["first_pass", "model", "ngram", "word_bonus"]
    assert info["ngram"].startswith("3-gram ARPA LM")
    g = pb_grpc.InfoStub(channel).GetInfo(pb.InfoRequest(), metadata=GRPC_AUTH)
    assert list(g.rerank_parts) == info["rerank_parts"] and g.ngram == info["ngram"]


def test_a_server_without_an_ngram_refuses_an_ngram_weight(cloze_run, tmp_path):
    import httpx

    from electric.export.exporter import export_model

    plain = tmp_path / "plain"
    export_model(cloze_run / "generator", plain, log=lambda _: None)
    with BackgroundServer(Settings(model=plain, http_port=0, grpc_port=-1, threads=1, warmup=False)) as srv:
        r = httpx.post(f"{srv.url}/v1/rerank", json={"lists": LISTS, "weights": {"ngram": 1.0}})
        assert r.status_code == 422 and "weights.ngram" in r.json()["error"] and "carries none" in r.json()["error"]
        r = httpx.post(f"{srv.url}/v1/score", json={"texts": ["a b"], "ngram": True})
        assert r.status_code == 422 and "no n-gram LM" in r.json()["error"]
        assert httpx.get(f"{srv.url}/info").json()["ngram"] is None


def test_a_broken_or_missing_ngram_stops_serve_in_one_line(model_dir, tmp_path, capsys):
    from server.cli import main

    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    (broken / "ngram.arpa").write_text("\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0\t<unk>\nnot-a-number\tb\n\\end\\\n")
    assert main(["--model", str(broken), "--http-port", "0", "--grpc-port", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ngram.arpa: line 6" in err[0] and "not a number" in err[0]
    (broken / "ngram.arpa").unlink()
    assert main(["--model", str(broken), "--http-port", "0", "--grpc-port", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'ngram' 'ngram.arpa' is not a file" in err[0]


@pytest.mark.parametrize("text,why", [
    ("ngram 1=1\n", "outside any section"),
    ("\\data\\\nngram 1=2\n\n\\1-grams:\n-1\t<unk>\n\\end\\\n", "declares 2 1-grams, the file lists 1"),
    ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1\tword\n\\end\\\n", "no <unk>"),
    ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1\t<unk>\n", "no \\\\end\\\\"),
])
def test_arpa_files_that_do_not_parse_are_named_with_what_is_wrong(text, why):
    with pytest.raises(NgramError, match=why):
        ArpaLM.parse(text, "x.arpa")


def test_info_is_the_clients_definition_field_for_field(http):
    """/info and the client's ServerInfo are one definition (the schema is built from electric.client.info): the
    server's answer has exactly the dataclasses' fields, and the client reads it back whole."""
    import dataclasses

    from electric.client.info import Limits, ModelInfo, ServerInfo
    from server.schemas import InfoResponse

    answer = http.get("/info").json()
    names = {cls: [f.name for f in dataclasses.fields(cls)] for cls in (ServerInfo, ModelInfo, Limits)}
    assert list(answer) == names[ServerInfo] == list(InfoResponse.model_fields)
    assert all(list(m) == names[ModelInfo] for m in answer["models"]) and list(answer["limits"]) == names[Limits]
    back = dataclasses.asdict(ServerInfo.from_dict(answer))
    assert {**back, "rerank_parts": list(back["rerank_parts"])} == answer
    assert InfoResponse.model_validate(answer).model_dump(mode="json") == answer
