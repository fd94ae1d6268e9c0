"""/v1/rerank and Scoring/Rerank on n-best lists of every size from 1 up, in any mix (issue 12, item 1).

A tiny torch scorer behind a real server: each list comes back reordered exactly as electric.evaluation.nbest.rerank_lists
orders it with the scores of `electric score`, whatever the sizes of the other lists in the request.
"""

from __future__ import annotations

import random

import grpc
import httpx
import numpy as np
import pytest

from electric.grpc_gen.electric.v1 import electric_pb2 as pb
from electric.grpc_gen.electric.v1 import electric_pb2_grpc as pb_grpc
from server.app import BackgroundServer
from server.settings import Settings

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ["show", "me", "the", "flights", "from", "boston", "to", "denver", "on", "monday", "morning", "list", "all",
         "fares"]


@pytest.fixture(scope="module")
def server(disc_dir):
    s = Settings(model=disc_dir, http_port=0, grpc_port=0, threads=1, access_log=False, max_inputs_per_request=256)
    with BackgroundServer(s) as srv:
        yield srv


def ragged_request(seed: int) -> list[tuple[str, list[str], list[float] | None]]:
    """Lists of 1 to 19 hypotheses (several of one), about half with first-pass scores."""
    rng = random.Random(seed)
    sizes = [1, 19, 1, *(rng.randint(1, 13) for _ in range(9))]
    rng.shuffle(sizes)
    out = []
    for i, n in enumerate(sizes):
        hyps = [" ".join(rng.choices(WORDS, k=rng.randint(1, 8))) for _ in range(n)]
        scores = sorted((rng.uniform(-2, 0) for _ in range(n)), reverse=True) if rng.random() < 0.5 else None
        out.append((f"utt{i}", hyps, scores))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_ragged_lists_over_http_and_grpc_are_reranked_one_by_one(server, disc_dir, seed):
    from electric.evaluation.nbest import NBestList, Weights, rerank_lists
    from electric.inference.scoring import load_scorer

    lists = ragged_request(seed)
    weights = {"lm": 0.3, "length": 0.5, "beta": 2.0}
    scorer = load_scorer(disc_dir, "electric", backend="torch")
    expected = rerank_lists([NBestList(u, h, s) for u, h, s in lists],
                            [np.array([r.score for r in scorer.score(h)]) for _, h, s in lists], Weights(**weights))
    body = {"lists": [{"id": u, "hypotheses": h, **({"scores": s} if s is not None else {})} for u, h, s in lists],
            "weights": weights}
    r = httpx.post(f"{server.url}/v1/rerank", json=body, timeout=60)
    assert r.status_code == 200, r.text
    got = r.json()["results"]
    assert [g["order"] for g in got] == [e.order for e in expected]
    assert [len(g["hyps"]) for g in got] == [len(h) for _, h, _ in lists]
    for g, e in zip(got, expected, strict=True):
        assert [h["total"] for h in g["hyps"]] == pytest.approx(e.total, abs=1e-4)
    with grpc.insecure_channel(server.grpc_target) as ch:
        reply = pb_grpc.ScoringStub(ch).Rerank(pb.RerankRequest(
            lists=[pb.NBestList(id=u, hypotheses=h, scores=s or []) for u, h, s in lists],
            weights=pb.RerankWeights(**weights)), timeout=60)
    assert [list(x.order) for x in reply.results] == [e.order for e in expected]
    assert [x.utt_id for x in reply.results] == [u for u, _, _ in lists]
    # a single list of one hypothesis
    one = httpx.post(f"{server.url}/v1/rerank", json={"hypotheses": ["list all flights"]}, timeout=60).json()
    assert one["results"][0]["order"] == [0] and one["results"][0]["best"] == "list all flights"


def test_http_and_grpc_accept_prior_and_report_ties(server):
    """A list without first-pass scores gets -beta * rank only with prior "rank"; by default (the server's
    prior "none") its order is no prior, so with no LM every hypothesis ties and the earlier position wins, said
    by `tied`. An unknown prior is a validation error on both transports."""
    hyps = ["list all flights", "list all fights", "show all flights"]
    url = f"{server.url}/v1/rerank"
    plain = httpx.post(url, json={"hypotheses": hyps, "weights": {"lm": 0.0}}, timeout=60).json()
    assert plain["weights"]["prior"] == "none" and plain["results"][0]["tied"] is True
    assert plain["results"][0]["order"] == [0, 1, 2] and [h["prior"] for h in plain["results"][0]["hyps"]] == [0.0] * 3
    ranked = httpx.post(url, json={"hypotheses": hyps, "weights": {"lm": 0.0, "prior": "rank", "beta": 2.0}},
                        timeout=60).json()
    assert ranked["weights"] == {"lm": 0.0, "length": 0.0, "beta": 2.0, "prior": "rank", "piece": 0.0,
                                 "lm_score": "sum", "ngram": 0.0}
    assert ranked["results"][0]["tied"] is False and [h["prior"] for h in ranked["results"][0]["hyps"]] == [0, -2, -4]
    # with the LM: prior none lets the LM order the list; a strong rank prior keeps the list's own order
    lm_only = httpx.post(url, json={"hypotheses": hyps, "weights": {"prior": "none"}}, timeout=60).json()["results"][0]
    lm = {h["text"]: h["lm"] for h in lm_only["hyps"]}
    assert lm_only["best"] == max(hyps, key=lm.get)
    strong = httpx.post(url, json={"hypotheses": hyps, "weights": {"prior": "rank", "beta": 1e6}}, timeout=60).json()
    assert strong["results"][0]["order"] == [0, 1, 2]
    bad = httpx.post(url, json={"hypotheses": hyps, "weights": {"prior": "alphabetical"}}, timeout=60)
    assert bad.status_code == 422 and "weights.prior" in bad.text
    with grpc.insecure_channel(server.grpc_target) as ch:
        stub = pb_grpc.ScoringStub(ch)
        g = stub.Rerank(pb.RerankRequest(lists=[pb.NBestList(hypotheses=hyps)], weights=pb.RerankWeights(lm=0.0)),
                        timeout=60)
        assert g.weights.prior == "none" and g.results[0].tied and list(g.results[0].order) == [0, 1, 2]
        g = stub.Rerank(pb.RerankRequest(lists=[pb.NBestList(hypotheses=hyps)], weights=pb.RerankWeights(
            lm=0.0, prior="rank", beta=2.0)), timeout=60)
        assert g.weights.prior == "rank" and not g.results[0].tied and [h.prior for h in g.results[0].hyps] == [0, -2, -4]
        with pytest.raises(grpc.RpcError) as ei:
            stub.Rerank(pb.RerankRequest(lists=[pb.NBestList(hypotheses=hyps)],
                                         weights=pb.RerankWeights(prior="alphabetical")), timeout=60)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "weights.prior" in ei.value.details()
