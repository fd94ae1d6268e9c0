"""electric.evaluation.nbest: formats round-trip, the combination, grid search and the reported error rates."""

from __future__ import annotations

import json

import jiwer
import numpy as np
import pytest
from conftest import require_shared

from electric.evaluation.nbest import (
    Evaluator,
    NBestError,
    NBestList,
    RerankOptions,
    ScoredLists,
    Weights,
    dev_test_split,
    format_report,
    make_metric,
    read_nbest,
    rerank_lists,
    rerank_report,
    reranked_nbest,
    unreorderable_fields,
    write_nbest,
)
from electric.evaluation.nbest.combination import combine
from electric.evaluation.nbest.readers import detect_format
from electric.evaluation.nbest.report import significance
from electric.evaluation.nbest.tuning import Components, paired_bootstrap, tune_weights


def real_items(name: str, n: int) -> list[dict]:
    with open(require_shared(f"nbest/{name}.whisper5best.json"), encoding="utf-8") as f:
        return json.load(f)[:n]


@pytest.fixture(scope="module")
def libri(tmp_path_factory):
    """The first 200 LibriSpeech test-clean 5-best lists (no first-pass scores)."""
    p = tmp_path_factory.mktemp("nb") / "libri.json"
    p.write_text(json.dumps(real_items("librispeech_test_clean", 200)))
    return p


ESPNET = {
    "utt_a": {"ref": "the cat sat", "hyp_1": {"score": -1.5, "text": "the cat sat", "tokens": [1, 2]},
              "hyp_2": {"score": -2.0, "text": "the cat sad", "tokens": [1, 3]}, "speaker": "s1"},
    "utt_b": {"hyp_2": {"score": -4.0, "text": "a dog"}, "hyp_1": {"score": -3.0, "text": "a dog ran"},
              "hyp_3": {"score": -9.0, "text": "dog"}},
}


# ---- formats ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["librispeech_test_clean", "atis_test", "wsj_eval"])
def test_hyporadise_round_trips_real_files(tmp_path, name):
    items = real_items(name, 30)
    src = tmp_path / "in.json"
    src.write_text(json.dumps(items))
    lists, fmt = read_nbest(src)
    assert fmt == "hyporadise" and len(lists) == 30
    if name == "atis_test":  # ids and am_score are read, and every unknown field is kept
        assert lists[0].utt_id == items[0]["id"] and lists[0].first_pass_scores == items[0]["am_score"]
    if name == "librispeech_test_clean":
        assert lists[0].first_pass_scores is None and "instruction" in lists[0].extra
    write_nbest(lists, tmp_path / "out.json", fmt)
    assert json.loads((tmp_path / "out.json").read_text()) == items
    assert read_nbest(tmp_path / "out.json")[0] == lists


def test_espnet_round_trips_with_unknown_fields(tmp_path):
    src = tmp_path / "in.json"
    src.write_text(json.dumps(ESPNET))
    lists, fmt = read_nbest(src)
    assert fmt == "espnet"
    b = lists[1]
    assert b.hyps == ["a dog ran", "a dog", "dog"] and b.first_pass_scores == [-3.0, -4.0, -9.0]  # by number
    assert b.ref is None and lists[0].extra == {"speaker": "s1"} and lists[0].hyp_extra[0] == {"tokens": [1, 2]}
    write_nbest(lists, tmp_path / "out.json", "espnet")
    assert json.loads((tmp_path / "out.json").read_text()) == ESPNET
    assert read_nbest(tmp_path / "out.json")[0] == lists
    many = {"u": {f"hyp_{k}": {"text": f"h{k}"} for k in (10, 2, 1)}}  # numeric, not lexical, order
    (tmp_path / "many.json").write_text(json.dumps(many))
    assert read_nbest(tmp_path / "many.json")[0][0].hyps == ["h1", "h2", "h10"]


def test_text_round_trips_and_formats_convert(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("the cat sat\nthe cat sad\n\n\na dog ran\na dog\n")
    lists, fmt = read_nbest(src)
    assert fmt == "text" and [nb.hyps for nb in lists] == [["the cat sat", "the cat sad"], ["a dog ran", "a dog"]]
    write_nbest(lists, tmp_path / "out.txt", "text")
    assert read_nbest(tmp_path / "out.txt")[0] == lists
    assert (tmp_path / "out.txt").read_text() == "the cat sat\nthe cat sad\n\na dog ran\na dog\n"
    (tmp_path / "refs.txt").write_text("the cat sat\na dog ran\n")
    with_refs, _ = read_nbest(src, refs=tmp_path / "refs.txt")
    write_nbest(with_refs, tmp_path / "h.json", "hyporadise")  # text -> HyPoradise keeps hyps and refs
    assert json.loads((tmp_path / "h.json").read_text())[1] == {"input": ["a dog ran", "a dog"], "output": "a dog ran"}
    assert detect_format(tmp_path / "h.json") == "hyporadise"


@pytest.mark.parametrize("content, fmt, message", [
    ('{"u1": {"hyp_1": {"text": "a"}}}', "hyporadise", "expected a JSON list"),
    ('[{"input": ["a", "b"], "output": "a"}, {"id": "spk1-7", "input": [], "output": "b"}]', "auto",
     "utterance 'spk1-7' (item 1): \"input\" is an empty list"),
    ('[{"input": ["a", "b"], "output": "a", "score": [1.0]}]', "auto", "utterance '0': \"score\" has 1 values"),
    ('[{"input": "a b", "output": "a"}]', "auto", "utterance '0': \"input\" must be a list"),
    ('[]', "auto", "holds no utterances"),
    ('[{"input": ["a"]}', "auto", "not valid JSON"),
    ('{"u1": {"ref": "a"}}', "auto", "utterance 'u1': no \"hyp_N\" entries"),
    ('{"u1": {"hyp_1": {"score": 1}}}', "auto", "utterance 'u1': \"hyp_1\" must be an object with a string"),
    ('{"u1": {"hyp_1": {"text": "a", "score": 1}, "hyp_2": {"text": "b"}}}', "auto", "missing: ['hyp_2']"),
    ("", "auto", "empty"),
])
def test_bad_files_name_the_file_and_utterance(tmp_path, content, fmt, message):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(NBestError) as ei:
        read_nbest(p, fmt)
    assert str(p) in str(ei.value) and message in str(ei.value)


def test_missing_reference_for_a_report_names_the_utterance(tmp_path):
    p = tmp_path / "in.json"
    p.write_text(json.dumps(ESPNET))
    lists, _ = read_nbest(p)
    with pytest.raises(NBestError, match=r"in\.json: utterance 'utt_b': no reference"):
        rerank_report(lists, [np.zeros(2), np.zeros(3)], RerankOptions(dev_fraction=0.5), path=p)


# ---- combination and reranking ---------------------------------------------------------------------------


def test_combination_formula_and_rank_prior():
    nb = NBestList("u", ["a b c", "a b", "x"])
    lm = [-10.0, -4.0, -1.0]
    w = Weights(lm=0.5, length=2.0, beta=3.0, prior="rank")
    np.testing.assert_allclose(combine(nb, lm, w), [0 - 5 + 6, -3 - 2 + 4, -6 - 0.5 + 2])
    # without prior "rank" a list without first-pass scores has no a(h): its order means nothing
    np.testing.assert_allclose(combine(nb, lm, Weights(lm=0.5, length=2.0, beta=3.0)), [-5 + 6, -2 + 4, -0.5 + 2])
    scored = NBestList("v", ["a", "b"], first_pass_scores=[-7.0, -1.0])
    np.testing.assert_allclose(combine(scored, [0.0, 0.0], w), [-7 + 2, -1 + 2])  # first pass replaces the prior
    (r,) = rerank_lists([nb], [lm], w)
    assert r.order == [0, 1, 2] and r.hyps[0] == "a b c" and r.total == sorted(r.total, reverse=True)
    (r,) = rerank_lists([nb], [lm], Weights(lm=10.0))  # a strong LM picks its favourite
    assert r.hyps[0] == "x" and r.order == [2, 1, 0]


def test_a_zero_prior_is_written_0_not_minus_0():
    """-beta * rank is -0.0 at rank 0, and at every rank with prior none (beta 0): the output says 0.0."""
    nb = NBestList("u", ["a b", "a", "b"])
    for w in (Weights(lm=1.0), Weights(lm=1.0, beta=2.0, prior="rank"), Weights(lm=0.0, length=0.0)):
        (r,) = rerank_lists([nb], [[-1.0, -2.0, -3.0]], w)
        assert "-0.0" not in json.dumps(r.to_dict()), r.to_dict()
        assert 0.0 in r.prior and all(np.copysign(1.0, a) == 1.0 for a in r.prior if a == 0)


def test_lm_weight_zero_keeps_first_hypothesis_and_wer_matches_jiwer(libri):
    lists, _ = read_nbest(libri)
    rng = np.random.default_rng(0)
    lm = [rng.normal(size=len(nb.hyps)) * 50 for nb in lists]
    reranked = rerank_lists(lists, lm, Weights(lm=0.0, length=0.0))
    assert [r.hyps[0] for r in reranked] == [nb.hyps[0] for nb in lists]
    _, report = rerank_report(lists, lm, RerankOptions(weights=Weights(lm=0.0)))
    expected = 100 * jiwer.wer([nb.ref for nb in lists], [nb.hyps[0] for nb in lists])
    assert report["test"]["reranked"] == pytest.approx(expected, abs=1e-9)
    assert report["test"]["first"] == pytest.approx(expected, abs=1e-9)
    # oracle: per utterance the hypothesis with the fewest edits
    edits = sum(min(jiwer.process_words(nb.ref, h).wer * len(nb.ref.split()) for h in nb.hyps) for nb in lists)
    assert report["test"]["oracle"] == pytest.approx(100 * edits / sum(len(nb.ref.split()) for nb in lists))


def test_grid_search_finds_a_helpful_lm_and_reports_splits(libri):
    lists, _ = read_nbest(libri)
    metric = make_metric("wer")
    ev = Evaluator(lists, metric)
    # an "LM" that knows each hypothesis' errors: tuning must find weights that reach the oracle
    lm = [-ev.stats[u, : len(nb.hyps), 0] for u, nb in enumerate(lists)]
    w, report = rerank_report(lists, lm, RerankOptions(dev_fraction=0.5, seed=3))
    assert w.lm > 0
    assert report["test"]["reranked"] == pytest.approx(report["test"]["oracle"])
    assert report["test"]["reranked"] < report["test"]["first"]
    dev_ids, test_ids = report["dev"]["ids"], report["test"]["ids"]
    assert len(dev_ids) == len(test_ids) == 100 and not set(dev_ids) & set(test_ids)
    assert report["all"]["first"] == pytest.approx(ev.first())
    assert report["dev_source"] == {"fraction": 0.5, "seed": 3}
    # the same seed gives the same split; another seed another
    assert dev_test_split(lists, 0.5, 3) == dev_test_split(lists, 0.5, 3) != dev_test_split(lists, 0.5, 4)


def test_grid_edge_is_reported():
    lists = [NBestList(str(i), ["a b", "a c"], ref="a c") for i in range(4)]
    ev = Evaluator(lists, make_metric("wer"))
    lm = [np.array([0.0, 0.5])] * 4  # a weak but right preference: only the largest LM weight beats the prior
    res = tune_weights(ev, Components.of(lists, lm), lm_grid=[0, 0.1, 1, 10], length_grid=[0], prior="rank")
    assert res.weights.lm == 10 and res.on_edge and "maximum" in res.on_edge[0]


def test_compare_counts_the_utterances_a_choice_made_better_and_worse():
    lists = [NBestList("a", ["x y", "x z"], ref="x z"), NBestList("b", ["p q", "p r"], ref="p q"),
             NBestList("c", ["m n", "m o"], ref="m k"), NBestList("d", ["u", "v"], ref="u")]
    ev = Evaluator(lists, make_metric("wer"))
    base, new = np.array([0, 0, 0, 0]), np.array([1, 1, 1, 0])  # a: better, b: worse, c: as bad, d: the same
    assert ev.compare(base, new) == (1, 1) and ev.compare(new, base) == (1, 1) and ev.compare(base, base) == (0, 0)
    bleu = Evaluator([NBestList("a", ["the cat sat on the mat", "a dog"], ref="the cat sat on the mat")],
                     make_metric("bleu"))
    assert bleu.compare(np.array([1]), np.array([0])) == (1, 0)  # higher is better there


def test_bleu_from_sufficient_statistics_equals_sacrebleu():
    import sacrebleu

    items = real_items("wsj_eval", 40)
    lists = [NBestList(str(i), it["input"], it["score"], it["output"]) for i, it in enumerate(items)]
    ev = Evaluator(lists, make_metric("bleu"))
    sel = np.arange(len(lists)) % 5
    expected = sacrebleu.corpus_bleu([nb.hyps[k] for nb, k in zip(lists, sel, strict=True)],
                                     [[nb.ref for nb in lists]]).score
    assert ev.score_selection(sel) == pytest.approx(expected, abs=1e-9)
    chrf = Evaluator(lists, make_metric("chrf"))
    assert chrf.first() == pytest.approx(sacrebleu.corpus_chrf([nb.hyps[0] for nb in lists],
                                                               [[nb.ref for nb in lists]]).score, abs=1e-9)


SACRE_REF, SACRE_HYPS = "the cat sat on the mat", ["the cat sat on a mat", "a cat", ""]
# what make_metric gave when both metrics read sacrebleu's private corpus methods: per-hypothesis statistics
# (BLEU: hyp length, ref length, matches and totals of 1..4-grams; chrF: hyp, ref, match counts of 1..6-grams),
# each hypothesis' score and the corpus score of their sum
SACRE_PINNED = {
    "bleu": ([[6, 6, 5, 3, 2, 1, 6, 5, 4, 3], [2, 6, 1, 0, 0, 0, 2, 1, 0, 0], [0, 6, 0, 0, 0, 0, 0, 0, 0, 0]],
             [53.7284965911771, 0.0, 0.0], 14.32523984300951),
    "chrf": ([[15, 17, 14, 14, 16, 12, 13, 15, 10, 12, 14, 8, 11, 13, 7, 10, 12, 6],
              [4, 17, 4, 3, 16, 2, 2, 15, 1, 1, 14, 0, 0, 13, 0, 0, 12, 0],
              [0, 17, 0, 0, 16, 0, 0, 15, 0, 0, 14, 0, 0, 13, 0, 0, 12, 0]],
             [65.97965990995549, 12.716071011445923, 0.0], 27.455237167322384),
}


@pytest.mark.parametrize("name", ["bleu", "chrf"])
def test_sacrebleu_statistics_pinned_and_equal_to_the_public_api(name):
    from sacrebleu.metrics import BLEU, CHRF

    stats, per_hyp, corpus = SACRE_PINNED[name]
    metric, public = make_metric(name), (BLEU() if name == "bleu" else CHRF())
    got = metric.stats(SACRE_REF, SACRE_HYPS)
    assert got.tolist() == stats
    assert [metric.score(row) for row in got] == pytest.approx(per_hyp, abs=1e-9)
    assert metric.score(got.sum(0)) == pytest.approx(corpus, abs=1e-9)
    # one hypothesis' score is the corpus score of a one-sentence corpus (corpus settings: no effective order)
    assert per_hyp == pytest.approx([public.corpus_score([h], [[SACRE_REF]]).score for h in SACRE_HYPS], abs=1e-9)
    assert corpus == pytest.approx(public.corpus_score(SACRE_HYPS, [[SACRE_REF] * 3]).score, abs=1e-9)


def test_chrf_without_the_statistics_methods_fails_at_construction(monkeypatch):
    from sacrebleu.metrics import CHRF

    monkeypatch.setattr(CHRF, "_extract_corpus_statistics", None)  # as if an upgrade had removed it
    with pytest.raises(RuntimeError, match=r"has no CHRF\._extract_corpus_statistics.*sacrebleu>=2\.3,<3"):
        make_metric("chrf")


def test_reranked_lists_keep_format_and_add_scores(tmp_path):
    src = tmp_path / "in.json"
    src.write_text(json.dumps(ESPNET))
    lists, _ = read_nbest(src)
    lm = [np.array([-5.0, 0.0]), np.array([0.0, 0.0, 0.0])]
    out = [reranked_nbest(nb, r) for nb, r in zip(lists, rerank_lists(lists, lm, Weights(lm=1.0)), strict=True)]
    write_nbest(out, tmp_path / "out.json", "espnet")
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["utt_a"]["hyp_1"]["text"] == "the cat sad" and data["utt_a"]["hyp_1"]["tokens"] == [1, 3]
    assert data["utt_a"]["hyp_1"]["score"] == -2.0 and data["utt_a"]["hyp_1"]["total_score"] == -2.0
    assert data["utt_a"]["ref"] == "the cat sat" and data["utt_a"]["speaker"] == "s1"


# ---- ragged lists: any list size, in any mix, in dev and test ----------------------------------------------

WORDS = ["show", "me", "the", "flights", "from", "boston", "to", "denver", "on", "monday", "morning", "list", "all",
         "fares"]


def random_lists(rng: np.random.Generator, sizes, first_pass: str, prefix: str = "u") -> list[NBestList]:
    """One list per entry of `sizes`, of random hypotheses around a random reference; first-pass scores on
    every list ("all"), none ("none") or about half of them ("mixed")."""
    out = []
    for i, n in enumerate(sizes):
        ref = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 9))))
        hyps = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 9)))) if rng.random() < 0.8 else ref
                for _ in range(n)]
        scored = first_pass == "all" or (first_pass == "mixed" and rng.random() < 0.5)
        fp = sorted(rng.normal(size=n).tolist(), reverse=True) if scored else None
        out.append(NBestList(f"{prefix}{i}", hyps, fp, ref))
    return out


def corpus_score(metric: str, lists: list[NBestList], best: list[str]) -> float:
    import sacrebleu

    refs = [nb.ref for nb in lists]
    if metric == "wer":
        return 100 * jiwer.wer(refs, best)
    return (sacrebleu.corpus_bleu if metric == "bleu" else sacrebleu.corpus_chrf)(best, [refs]).score


def check_report_against_per_list_reranking(report: dict, test: list[NBestList], lm: list[np.ndarray]) -> None:
    """Every figure of the test split equals the corpus metric of what rerank_lists (one list at a time, no
    padding) puts first."""
    metric, t = report["metric"], report["test"]
    assert t["first"] == pytest.approx(corpus_score(metric, test, [nb.hyps[0] for nb in test]), abs=1e-6)
    for key, w in (("reranked", report["weights"]), ("no_lm", report["weights_no_lm"])):
        best = [r.hyps[0] for r in rerank_lists(test, lm, Weights(**w))]
        assert t[key] == pytest.approx(corpus_score(metric, test, best), abs=1e-6), key


@pytest.mark.parametrize("metric", ["wer", "bleu", "chrf"])
@pytest.mark.parametrize("first_pass", ["none", "all", "mixed"])
def test_ragged_lists_with_a_dev_file_of_another_longest_size(metric, first_pass):
    rng = np.random.default_rng(["wer", "bleu", "chrf"].index(metric) * 3 + ["none", "all", "mixed"].index(first_pass))
    for dev_sizes, test_sizes in (([19, *rng.integers(1, 14, size=30)], rng.integers(1, 14, size=30)),
                                  ([1] * 10, [1, *rng.integers(1, 20, size=25)]),  # single-hypothesis dev lists
                                  (rng.integers(1, 5, size=20), [1] * 8)):
        dev, test = random_lists(rng, dev_sizes, first_pass, "d"), random_lists(rng, test_sizes, first_pass, "t")
        assert max(len(nb.hyps) for nb in dev) != max(len(nb.hyps) for nb in test)
        dev_lm = [rng.normal(size=len(nb.hyps)) * 3 for nb in dev]
        test_lm = [rng.normal(size=len(nb.hyps)) * 3 for nb in test]
        _, report = rerank_report(test, test_lm, RerankOptions(metric=metric), dev=(dev, dev_lm))
        check_report_against_per_list_reranking(report, test, test_lm)
        assert report["dev"]["num_utterances"] == len(dev)


@pytest.mark.parametrize("metric", ["wer", "bleu"])
@pytest.mark.parametrize("seed", range(4))
def test_ragged_lists_split_by_fraction(metric, seed):
    """One list of 19 among lists of 1-13: the dev and test parts of the split have different longest lists."""
    rng = np.random.default_rng(seed)
    lists = random_lists(rng, [*rng.integers(1, 14, size=40), 19], ["none", "all", "mixed", "mixed"][seed])
    lm = [rng.normal(size=len(nb.hyps)) * 3 for nb in lists]
    _, report = rerank_report(lists, lm, RerankOptions(metric=metric, dev_fraction=0.5, seed=seed))
    test = [lists[[nb.utt_id for nb in lists].index(u)] for u in report["test"]["ids"]]
    check_report_against_per_list_reranking(report, test, [lm[[nb.utt_id for nb in lists].index(u)]
                                                           for u in report["test"]["ids"]])
    # fixed weights on ragged lists, and a selection of the wrong width is a clear error
    _, fixed = rerank_report(lists, lm, RerankOptions(metric=metric, weights=Weights(lm=0.5, length=0.1)))
    check_report_against_per_list_reranking(fixed, lists, lm)
    ev = Evaluator(lists, make_metric(metric))
    with pytest.raises(ValueError, match=r"shape \(41, 18\) for \(41, 19\)"):
        ev.select(np.zeros((41, 18)))


# ---- the result without the LM ----------------------------------------------------------------------------


def test_reports_show_the_dev_tuned_result_without_the_lm():
    """A word bonus alone can fix lists whose recogniser drops a word: the report shows how much of the gain
    needs no LM at all, and what the LM adds on top."""
    lists = []
    for i in range(40):
        ref = f"flights from city{i} to denver"
        lists.append(NBestList(str(i), [f"flights from city{i} denver", ref, f"flights city{i} to denver"], ref=ref))
    lm = [np.zeros(3) for _ in lists]  # an LM that knows nothing
    w, report = rerank_report(lists, lm, RerankOptions(dev_fraction=0.5))
    assert report["weights_no_lm"]["lm"] == 0 and report["weights_no_lm"]["length"] > 0
    for split in ("dev", "test"):
        assert report[split]["no_lm"] == report[split]["oracle"] == 0.0 < report[split]["first"]
    assert report["grid"]["bonus_no_lm"][0] == 0.0 and report["test"]["reranked"] == report["test"]["no_lm"]
    text = format_report(report)
    assert "no_lm 0.00%" in text and "without the LM" in text and "tuned on dev" in text
    assert ("the LM's own gain on test: WER 0.00% without it, 0.00% with it (gain +0.00; not applied: its dev gain "
            "was not significant)") in text
    # with given weights, no_lm is the same weights with the LM weight set to 0
    _, fixed = rerank_report(lists, lm, RerankOptions(weights=Weights(lm=2.0, length=-1.0, beta=1.0)))
    assert fixed["weights_no_lm"] == {"lm": 0.0, "length": -1.0, "beta": 1.0, "prior": "none", "piece": 0.0,
                                      "lm_score": "sum", "ngram": 0.0}
    assert fixed["test"]["no_lm"] == fixed["test"]["first"]  # a word penalty keeps the shorter first hypothesis
    assert "the given weights with lm 0" in format_report(fixed)


# ---- the guard: the LM is kept only when its dev gain is significant ------------------------------------------


def test_paired_bootstrap_by_hand():
    lists = [NBestList(str(i), ["a b", "a c"], ref="a c") for i in range(10)]  # hypothesis 1 is right, 0 is not
    ev = Evaluator(lists, make_metric("wer"))
    first, right = np.zeros(10, dtype=np.int64), np.ones(10, dtype=np.int64)
    same = paired_bootstrap(ev, first, first, seed=1)
    assert same["gain"] == 0 and same["ci"] == [0.0, 0.0] and not same["significant"]
    better = paired_bootstrap(ev, first, right, seed=1)  # 50% -> 0% WER on every resample
    assert better["gain"] == better["ci"][0] == better["ci"][1] == 50.0 and better["significant"]
    half = np.array([1] * 5 + [0] * 5)
    worse = paired_bootstrap(ev, right, half, resamples=500, seed=2, confidence=0.9)
    assert worse["gain"] == -25.0 and worse["ci"][0] < -25.0 < worse["ci"][1] < 0 and not worse["significant"]
    assert worse == paired_bootstrap(ev, right, half, resamples=500, seed=2, confidence=0.9)  # seeded
    assert {k: worse[k] for k in ("confidence", "resamples", "seed")} == {"confidence": 0.9, "resamples": 500,
                                                                         "seed": 2}


@pytest.fixture(scope="module")
def atis():
    """All 809 ATIS test lists (with am_score first-pass scores) and their per-hypothesis word errors."""
    lists, _ = read_nbest(require_shared("nbest/atis_test.whisper5best.json"))
    ev = Evaluator(lists, make_metric("wer"))
    return lists, [ev.stats[u, : len(nb.hyps), 0] for u, nb in enumerate(lists)]


@pytest.mark.parametrize("seed", range(3))
def test_guard_keeps_the_first_pass_on_pure_noise_lm_scores(atis, seed):
    """Tuning alone finds LM weights that look better on dev (by chance); the guard does not keep them."""
    lists, _ = atis
    rng = np.random.default_rng(seed)
    noise = [rng.normal(size=len(nb.hyps)) for nb in lists]
    w, report = rerank_report(lists, noise, RerankOptions(dev_fraction=0.5, seed=seed))
    g = report["guard"]
    assert report["weights_lm"]["lm"] > 0 and report["dev"]["with_lm"] < report["dev"]["no_lm"]  # chance "gain"
    assert g["gain"] > 0 and g["ci"][0] <= 0 < g["ci"][1] and not g["significant"] and g["kept"] == "no_lm"
    assert w.lm == 0 and report["applied"] in ("no_lm", "first_pass")
    if report["applied"] == "no_lm":
        assert report["weights"] == report["weights_no_lm"] and report["guard_no_lm"]["significant"]
        for split in ("dev", "test", "all"):
            assert report[split]["reranked"] == report[split]["no_lm"]
    else:
        assert report["weights"] == Weights(beta=1.0).to_dict() and not report["guard_no_lm"]["significant"]
    text = format_report(report)
    assert "not significant: the LM is NOT used (reranked = " in text
    assert f"95% CI [{g['ci'][0]:+.2f}, {g['ci'][1]:+.2f}]" in text and "1000 resamples, seed" in text


def test_guard_keeps_a_real_signal(atis):
    """An LM that knows something (a noisy count of each hypothesis' errors) is kept, with its interval."""
    lists, errors = atis
    rng = np.random.default_rng(0)
    lm = [-e + rng.normal(size=len(e)) for e in errors]
    w, report = rerank_report(lists, lm, RerankOptions(dev_fraction=0.5, seed=0))
    g = report["guard"]
    assert g["significant"] and g["kept"] == "lm" and 0 < g["ci"][0] <= g["gain"] <= g["ci"][1]
    assert w.lm > 0 and report["weights"] == report["weights_lm"]
    t = report["test"]
    assert t["reranked"] == t["with_lm"] < t["no_lm"] <= t["first"] and t["oracle"] <= t["reranked"]
    assert "significant: the LM is used" in format_report(report)


def test_the_all_row_has_the_reranked_figure(atis):
    lists, errors = atis
    lm = [-e for e in errors]
    _, report = rerank_report(lists, lm, RerankOptions(dev_fraction=0.5, seed=0))
    assert {"first", "oracle", "lm_only", "no_lm", "with_lm", "reranked"} <= set(report["all"])
    ev = Evaluator(lists, make_metric("wer"))
    best = [r.hyps[0] for r in rerank_lists(lists, lm, Weights(**report["weights"]))]
    assert report["all"]["reranked"] == pytest.approx(corpus_score("wer", lists, best), abs=1e-9)
    assert report["all"]["reranked"] < ev.first()
    assert "all (dev + test; dev was tuned on)" in format_report(report)


# ---- a baseline with the length an LM score carries for free ------------------------------------------------


@pytest.fixture(scope="module")
def count_pieces(tokenizer_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    return lambda lists: [np.array([len(tok.encode(h, add_special_tokens=False).ids) for h in nb.hyps], dtype=float)
                          for nb in lists]


@pytest.mark.parametrize("name", ["atis_test", "wsj_eval"])
def test_an_lm_that_scores_every_piece_the_same_is_rejected(name, count_pieces):
    """The quick start's undertrained model gives every piece about the same score (-8.65 * pieces). The no-LM
    baseline gets a per-piece bonus beside the per-word one, so such an "LM" brings nothing over it and the
    guard rejects it; the report names both runs' bonuses."""
    lists, _ = read_nbest(require_shared(f"nbest/{name}.whisper5best.json"))
    pieces = count_pieces(lists)
    flat = [-8.65 * n for n in pieces]
    w, report = rerank_report(lists, flat, RerankOptions(dev_fraction=0.5, seed=0), pieces=pieces)
    g, gn = report["guard"], report["guard_no_lm"]
    assert not g["significant"] and g["kept"] == "no_lm" and w.lm == 0 and report["applied"] != "lm"
    assert g["ci"][0] <= 0 and report["no_lm_features"] == ["words", "pieces"]
    assert report["applied"] == ("no_lm" if gn["significant"] else "first_pass")
    assert set(gn) >= {"gain", "ci", "significant", "kept"}
    assert report["bonuses"]["no_lm"] == {"per_word": report["weights_no_lm"]["length"],
                                          "per_piece": report["weights_no_lm"]["piece"]}
    assert report["bonuses"]["with_lm"] == {"per_word": report["weights_lm"]["length"]}
    # the reported figures are what rerank_lists does with the same weights and pieces
    test_idx = [[nb.utt_id for nb in lists].index(u) for u in report["test"]["ids"]]
    test = [lists[i] for i in test_idx]
    best = [r.hyps[0] for r in rerank_lists(test, [flat[i] for i in test_idx], Weights(**report["weights_no_lm"]),
                                            [pieces[i] for i in test_idx])]
    assert report["test"]["no_lm"] == pytest.approx(corpus_score("wer", test, best), abs=1e-9)
    text = format_report(report)
    assert "/piece" in text and "dev gain of no_lm over the first pass" in text
    assert ("not significant: the LM is NOT used" in text) != ("significantly worse: the LM is NOT used" in text)
    # without the piece counts the same flat "LM" would pass for a length feature the baseline lacks
    _, words_only = rerank_report(lists, flat, RerankOptions(dev_fraction=0.5, seed=0))
    assert words_only["no_lm_features"] == ["words"] and "no piece counts given" in format_report(words_only)


def test_the_first_pass_is_kept_unless_the_bonuses_gain_significantly():
    """Ordered lists without scores (prior rank) where the longer of two hypotheses is right about as often as
    the first: a word bonus "gains" on dev by chance, but not significantly, so the first pass is applied and
    the interval of the bonuses' dev gain is reported."""
    lists = []
    for i in range(80):
        ref = f"show flights from city{i} to denver"
        longer_right = i % 9 in (0, 2, 4, 6, 7)  # 5 in 9: slightly more often than the first
        hyps = [f"show flights city{i} to denver", ref] if longer_right else [ref, ref + " please"]
        lists.append(NBestList(str(i), hyps, ref=ref))
    lm = [np.zeros(len(nb.hyps)) for nb in lists]
    w, report = rerank_report(lists, lm, RerankOptions(dev_fraction=0.5, seed=0, prior="rank"))
    gn = report["guard_no_lm"]
    assert report["dev"]["no_lm"] < report["dev"]["first"] and gn["gain"] > 0  # a chance gain on dev
    assert gn["ci"][0] <= 0 and not gn["significant"] and gn["kept"] == "first_pass"
    assert report["applied"] == "first_pass" and w == Weights(beta=1.0, prior="rank")
    assert report["test"]["reranked"] == report["test"]["first"]
    assert "not significant: without the LM the first pass is kept" in format_report(report)


def test_an_lm_significantly_worse_on_dev_is_said_to_be():
    """Issue 51, item 6: an LM whose whole dev interval lies below 0 is "significantly worse", not "not
    significant" (here a grid without lm 0 forces an LM that prefers the wrong hypothesis of every list)."""
    lists = [NBestList(str(i), [f"show flights to city{i}", f"show fights to city{i}"], [-1.0, -2.0],
                       ref=f"show flights to city{i}") for i in range(60)]
    lm = [np.array([-20.0, 0.0]) for _ in lists]  # the wrong one far ahead
    _, report = rerank_report(lists, lm, RerankOptions(dev_fraction=0.5, seed=0, lm_grid=(1.0,)))
    g = report["guard"]
    assert g["ci"][1] < 0 and not g["significant"] and report["applied"] != "lm"
    assert significance(g) == "significantly worse"
    text = format_report(report)
    assert "significantly worse: the LM is NOT used" in text and "not significant: the LM" not in text
    assert "not applied: it was significantly worse on dev" in text
    assert [significance({"significant": s, "ci": ci}) for s, ci in
            ((True, [0.1, 0.5]), (False, [-0.1, 0.5]), (False, [-0.5, -0.1]))] == [
        "significant", "not significant", "significantly worse"]


# ---- what the prior assumes; ties ------------------------------------------------------------------------------


def test_unordered_lists_get_no_rank_prior_by_default():
    """Candidates of several MT systems in alphabetical order: the order says nothing, so by default it is not
    a prior; the LM and the word bonus choose, and the report says what was assumed."""
    lists = [NBestList(str(i), [f"a sys{i} output", f"the right output {i}"], ref=f"the right output {i}")
             for i in range(30)]
    lm = [np.array([-3.0, -2.0]) for _ in lists]  # a weak but right preference, below the rank prior's step of 1
    (r,) = rerank_lists(lists[:1], lm[:1], Weights(lm=0.5))
    assert r.order == [1, 0] and r.prior == [0.0, 0.0]
    (r,) = rerank_lists(lists[:1], lm[:1], Weights(lm=0.5, prior="rank"))  # the order as a first-pass order
    assert r.order == [0, 1] and r.prior == [0.0, -1.0]
    w, report = rerank_report(lists, lm, RerankOptions(dev_fraction=0.5))
    assert w.prior == "none" and report["test"]["reranked"] == 0.0 < report["test"]["first"]
    assert "prior none: all lists have no first-pass scores" in report["prior_note"]
    text = format_report(report)
    assert "no rank prior" in text and "note: prior none" in text and "--prior rank" in text
    _, ranked = rerank_report(lists, lm, RerankOptions(dev_fraction=0.5, prior="rank", lm_grid=[0, 0.5], length_grid=[0]))
    assert ranked["weights"]["prior"] == "rank" and "taken as a first-pass order" in ranked["prior_note"]
    assert ranked["test"]["with_lm"] == ranked["test"]["first"]  # the prior wins over the weak LM
    scored = [NBestList(nb.utt_id, nb.hyps, [0.0, -1.0], nb.ref) for nb in lists]
    assert "prior_note" not in rerank_report(scored, lm, RerankOptions(dev_fraction=0.5))[1]  # nothing was assumed


def test_ties_go_to_the_earlier_position_and_are_counted():
    lists = [NBestList("a", ["x y", "x z", "w"], ref="x z"), NBestList("b", ["p", "q"], ref="q"),
             NBestList("c", ["only"], ref="only"), NBestList("d", ["same", "same", "other"], [-1.0, -1.0, -2.0], "same")]
    lm = [np.array([-1.0, -1.0, -5.0]), np.array([-2.0, -1.0]), np.array([0.0]), np.array([-1.0, -1.0, -1.0])]
    ra, rb, rc, rd = rerank_lists(lists, lm, Weights(lm=1.0))
    assert ra.order == [0, 1, 2] and ra.tied and not rb.tied and rb.order == [1, 0] and not rc.tied
    assert rd.order == [0, 1, 2] and not rd.tied  # a duplicate of the chosen text is no tie
    assert ra.to_dict()["tied"] is True
    _, report = rerank_report(lists, lm, RerankOptions(weights=Weights(lm=1.0)))
    assert report["test"]["ties"] == 1
    _, report = rerank_report(lists, lm, RerankOptions(weights=Weights(lm=0.0)))  # no LM, no prior: lists a and b tie
    assert report["test"]["ties"] == 2 and report["test"]["reranked"] == report["test"]["first"]
    assert "2 tied choices (the earlier position won)" in format_report(report)
    assert rerank_report(lists, lm, RerankOptions(weights=Weights(lm=0.0, prior="rank")))[1]["test"]["ties"] == 0


# ---- per-hypothesis fields follow their hypotheses -----------------------------------------------------------


def test_reranked_hyporadise_items_reorder_every_per_hypothesis_field(tmp_path):
    items = [{"id": "u1", "input": ["a b", "a c", "d"], "output": "a c", "score": [-1.0, -2.0, -3.0],
              "am_score": [-10.0, -20.0, -30.0], "ctc": [[1], [2], [3]], "speaker": "s1", "words": ["x", "y", "z"]},
             {"id": "u2", "input": ["p", "q"], "output": "q", "score": [-1.0, -1.5], "am_score": [-5.0, -6.0],
              "ctc": [[4], [5]], "words": ["only one"]}]
    src = tmp_path / "in.json"
    src.write_text(json.dumps(items))
    lists, fmt = read_nbest(src)
    assert lists[0].hyp_extra[1] == {"am_score": -20.0, "ctc": [2]} and lists[0].extra == {
        "id": "u1", "speaker": "s1", "words": ["x", "y", "z"]}  # "words": one per hypothesis in u1 only
    write_nbest(lists, tmp_path / "same.json", fmt)
    assert json.loads((tmp_path / "same.json").read_text()) == items  # round trip
    lm = [np.array([0.0, 5.0, 1.0]), np.array([0.0, 5.0])]
    reranked = rerank_lists(lists, lm, Weights(lm=1.0))
    dropped = unreorderable_fields(lists)
    assert dropped == ["words"]
    write_nbest([reranked_nbest(nb, r, dropped) for nb, r in zip(lists, reranked, strict=True)],
                tmp_path / "out.json", fmt)
    out = json.loads((tmp_path / "out.json").read_text())
    for item, orig in zip(out, items, strict=True):
        order = [orig["input"].index(h) for h in item["input"]]
        assert order[0] == 1 and "words" not in item
        for k in ("score", "am_score", "ctc"):
            assert item[k] == [orig[k][i] for i in order], k
        assert item["total_score"] == sorted(item["total_score"], reverse=True) and len(item["lm_score"]) == len(order)
    assert out[0]["speaker"] == "s1" and out[0]["id"] == "u1"
    # the same lists as ESPnet: the per-hypothesis fields go into each hypothesis
    write_nbest(lists, tmp_path / "e.json", "espnet")
    assert json.loads((tmp_path / "e.json").read_text())["u1"]["hyp_2"] == {"score": -2.0, "text": "a c",
                                                                           "am_score": -20.0, "ctc": [2]}


def test_the_lm_score_is_chosen_on_dev_and_a_tie_keeps_the_sum():
    from electric.evaluation.nbest.rerank import choose_lm_score

    assert choose_lm_score({"sum": 10.0, "mean": 9.0}, higher_is_better=False) == "mean"  # WER: lower wins
    assert choose_lm_score({"sum": 10.0, "mean": 9.0}, higher_is_better=True) == "sum"  # BLEU: higher wins
    assert choose_lm_score({"sum": 9.0, "mean": 9.0}, higher_is_better=False) == "sum"
    assert choose_lm_score({"sum": 9.0, "mean": 9.0}, higher_is_better=True) == "sum"
    scored = ScoredLists.from_rows([NBestList("a", ["x", "y"])], [np.array([[-6.0, -2.0], [-4.0, -1.0]])])
    assert [c.tolist() for c in scored.lm("mean")] == [[-2.0, -1.0]] and scored.pieces is None
    with pytest.raises(ValueError, match="sum, mean"):
        scored.lm("max")
    with pytest.raises(NBestError, match="for 2 hypotheses"):
        ScoredLists(scored.lists, [np.zeros(3)], [np.zeros(2)])


def test_rerank_nbest_is_one_call_scoring_each_text_once_with_the_weights_lm_score():
    """`rerank_nbest` scores every distinct hypothesis once, tunes or applies the weights with the LM score they
    name, and reports the texts it could not score (ranked last, never chosen)."""
    from types import SimpleNamespace

    from electric.evaluation.nbest import rerank_nbest, rerank_scored

    lists = [NBestList("a", ["the cat sat", "the cat sat down here", ""], None, "the cat sat down here"),
             NBestList("b", ["a dog", "the cat sat"], None, "a dog")]
    asked: list[str] = []

    def score_texts(texts):
        asked.extend(texts)
        return [SimpleNamespace(score=-2.0 * len(t.split()), mean=-2.0 + 0.1 * len(t.split()),
                                num_tokens=len(t.split())) for t in texts]

    given = Weights(lm=1.0, lm_score="mean")
    result = rerank_nbest(lists, score_texts, RerankOptions(weights=given))
    assert sorted(asked) == sorted({h for nb in lists for h in nb.hyps}) and result.unscored == [""]
    assert result.weights == given and result.report.lm_score == "mean"
    assert result.report.to_dict()["weights"]["lm_score"] == "mean"
    assert [r.hyps[0] for r in result.reranked] == ["the cat sat down here", "the cat sat"]  # the higher mean
    assert np.isnan(result.scored.sum[0][2]) and result.reranked[0].hyps[-1] == ""  # nothing to score: last
    assert result.scored.pieces[0][2] == 0
    by_sum = rerank_scored(result.scored, RerankOptions(weights=Weights(lm=1.0)))
    assert [r.hyps[0] for r in by_sum.reranked] == ["the cat sat", "a dog"]  # the higher sum: fewer words
    rows = [np.column_stack([s, m, p]) for s, m, p in zip(result.scored.sum, result.scored.mean,
                                                          result.scored.pieces, strict=True)]
    again = ScoredLists.from_rows(lists, rows)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(again.mean, result.scored.mean, strict=True))


def test_tuned_weights_say_their_lm_score_in_every_row_of_the_report():
    """With lm_score auto both LM scores are tuned; the report's weights (applied, with and without the LM)
    carry the LM score they weigh, and the report is the dataclass's JSON in the order `--report` writes."""
    from electric.evaluation.nbest import rerank_scored

    lists = [NBestList(str(i), [f"a b c {i}", f"a b {i}"], ref=f"a b {i}") for i in range(20)]
    scored = ScoredLists.from_rows(lists, [np.array([[-6.0, -2.0, 3], [-4.0, -2.0, 2]]) for _ in lists])
    result = rerank_scored(scored, RerankOptions(dev_fraction=0.5))
    d = result.report.to_dict()
    assert list(d)[:2] == ["lm_score", "metric"] and list(d)[-2:] == ["lm_score_dev", "by_lm_score"]
    assert set(d["lm_score_dev"]) == {"sum", "mean"} and d["lm_score"] == result.weights.lm_score
    for key in ("weights", "weights_lm", "weights_no_lm"):
        assert d[key]["lm_score"] == d["lm_score"], key
