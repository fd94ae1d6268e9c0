"""electric.evaluation.ngram: the Kneser-Ney baseline LM, checked by hand on tiny corpora."""

import math

import pytest

from electric.evaluation.ngram import UNK, KneserNeyLM, discounts, words


def test_a_unigram_model_is_the_discounted_counts_plus_the_uniform_share_by_hand():
    # "a a b </s>": counts a 2, b 1, </s> 1 (total 4); n1 = 2, n2 = 1 -> Y = 1/2, D1 = 1/2, D2 = 2, D3+ = 0
    lm = KneserNeyLM.train(["a a b"], order=1)
    assert discounts({1: 2, 2: 1}) == (0.5, 2.0, 0.0)
    gamma = (0.5 * 2 + 2.0 * 1) / 4  # mass taken by the discounts
    uniform = 1 / 4  # a, b, </s> and <unk>
    assert lm.prob("a", []) == pytest.approx(max(2 - 2.0, 0) / 4 + gamma * uniform)
    assert lm.prob("b", []) == pytest.approx((1 - 0.5) / 4 + gamma * uniform)
    assert lm.prob("zebra", []) == lm.prob(UNK, []) == pytest.approx(gamma * uniform)


@pytest.mark.parametrize("context", [(), ("<s>",), ("<s>", "show"), ("show", "me"), ("never", "seen")])
def test_every_distribution_sums_to_one_over_the_vocabulary_and_unk(context):
    lm = KneserNeyLM.train(["show me flights to boston", "show me fares to denver", "list flights to boston",
                            "show the cheapest flights", "what flights go to denver"], order=3)
    assert sum(lm.prob(w, context) for w in [*lm.vocab, UNK]) == pytest.approx(1.0, abs=1e-12)


def test_a_word_seen_after_one_context_only_gets_little_of_the_lower_order_mass():
    """Kneser-Ney's point: 'francisco', frequent but only ever after 'san', is unlikely after a new word, where
    'glasses', rarer but after many words, is not."""
    corpus = ["san francisco"] * 6 + ["red glasses", "blue glasses", "my glasses", "green glasses"]
    lm = KneserNeyLM.train(corpus, order=2)
    assert lm.prob("francisco", ["san"]) > lm.prob("glasses", ["san"])
    assert lm.prob("francisco", ["old"]) < lm.prob("glasses", ["old"])


def test_a_domain_lm_prefers_the_in_domain_hypothesis_and_scores_in_natural_log():
    lm = KneserNeyLM.train(["show me flights from boston to denver", "show me flights to dallas",
                            "list flights from denver"] * 3, order=3)
    good, bad = lm.score("Show me flights to Denver"), lm.score("show me fights to denver")
    assert good.score > bad.score and good.num_tokens == 6  # five words and </s>
    toks = ["<s>", *words("show me flights to denver"), "</s>"]
    assert good.score == pytest.approx(sum(math.log(lm.prob(toks[i], toks[:i])) for i in range(1, len(toks))))
    assert good.mean == pytest.approx(good.score / 6)


def test_no_text_is_an_error():
    with pytest.raises(ValueError, match="no words"):
        KneserNeyLM.train(["", "  "])
    with pytest.raises(ValueError, match="order"):
        KneserNeyLM.train(["a b"], order=0)
