"""The n-gram LM a reranking user reaches for first: interpolated modified Kneser-Ney (Chen & Goodman 1998), trained
on plain sentences in pure Python, scoring a hypothesis as the sum of its words' natural-log probabilities.

    lm = KneserNeyLM.train(sentences, order=3)
    lm.score("show me flights to boston")        # ln P(show me flights to boston </s>)
    lm.score_texts(hyps)                          # NgramScore per text: what ScoredLists.score takes
    lm.write_arpa("ngram.arpa")                   # the same model as a standard ARPA file (electric.evaluation.arpa)

`electric adapt` trains one on the adaptation text, reranks the same dev and test lists with it, so that a model
card compares the adapted model with the baseline a user would otherwise build, and writes it into the model
directory as ARPA, which the server scores with (`electric.evaluation.arpa.ArpaLM`) and KenLM or any ASR toolkit reads. KenLM trains the same model far
faster on big corpora; the few thousand sentences of a domain take seconds here.

The model, for an order-n LM over words w (a sentence is <s> w_1 ... w_m </s>, its context cut at <s>):

    P(w | h) = max(c(h w) - D(c(h w)), 0) / c(h) + gamma(h) P(w | h')     gamma(h) = sum_k D_k N_k(h .) / c(h)

where h' is h without its first word, c is the raw count at the highest order and the continuation count (distinct
left neighbours) below it (an n-gram that starts with <s> has no left neighbour and keeps its raw count), D_1, D_2
and D_3+ are each order's discounts from its count-of-counts, N_k(h .) counts the words seen after h with each
discount's count, and the unigram level interpolates with the uniform distribution over the vocabulary and <unk>.
A context never seen backs off whole: P(w | h) = P(w | h').
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from electric.evaluation.arpa import BOS, EOS, UNK, NgramScore, words

__all__ = ["BOS", "EOS", "UNK", "KneserNeyLM", "NgramScore", "discounts", "words"]


def discounts(count_of_counts: Counter) -> tuple[float, float, float]:
    """(D_1, D_2, D_3+) of one order from n_k, the number of its n-grams seen exactly k times (Chen & Goodman's
    estimates); each clipped to [0, k] and 0 where the counts cannot estimate it (a tiny corpus)."""
    n1, n2, n3, n4 = (count_of_counts.get(k, 0) for k in (1, 2, 3, 4))
    if n1 == 0 or n2 == 0:
        return 0.5, 1.0, 1.5  # too little text to estimate: the usual values of a large corpus
    y = n1 / (n1 + 2 * n2)
    d = [1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2 if n2 else 0.0, 3 - 4 * y * n4 / n3 if n3 else 0.0]
    return tuple(min(max(x, 0.0), float(k + 1)) for k, x in enumerate(d))  # type: ignore[return-value]


class KneserNeyLM:
    """An interpolated modified Kneser-Ney LM (the module's docstring has the formula). Build with `train`."""

    def __init__(self, order: int, counts: list[dict[tuple[str, ...], Counter]], vocab: frozenset[str],
                 sentences: int, tokens: int):
        self.order = order
        self.vocab = vocab  # words seen in training, </s> included, <s> not (it is never predicted)
        self.sentences, self.tokens = sentences, tokens
        # per order k (1..n): context (k-1 words) -> Counter of next word -> its (raw or continuation) count
        self._counts = counts
        self._d = [discounts(Counter(c for nxt in by_ctx.values() for c in nxt.values())) for by_ctx in counts]
        # per order: context -> (total count, its gamma numerator)
        self._ctx = [{h: (sum(nxt.values()), self._gamma_numerator(k, nxt)) for h, nxt in by_ctx.items()}
                     for k, by_ctx in enumerate(counts)]

    @classmethod
    def train(cls, sentences: Iterable[str], order: int = 3) -> KneserNeyLM:
        """Count the n-grams of every sentence (`words` of each; empty ones skipped). ValueError for an order below
        1 or no words at all."""
        if order < 1:
            raise ValueError(f"an n-gram order is 1 or more, got {order}")
        raw: Counter = Counter()
        n_sent = n_tok = 0
        for s in sentences:
            ws = words(s)
            if not ws:
                continue
            n_sent += 1
            n_tok += len(ws)
            toks = [BOS, *ws, EOS]
            for i in range(1, len(toks)):
                raw[tuple(toks[max(0, i - order + 1): i + 1])] += 1
        if not raw:
            raise ValueError("no words to train an n-gram LM on")
        # every order's n-grams: the highest from raw counts, each lower from the distinct words before it
        grams: list[Counter] = [Counter() for _ in range(order)]
        for g, c in raw.items():
            grams[len(g) - 1][g] += c  # n-grams cut at <s> are shorter than the order: raw counts at their own
        for k in range(order - 1, 0, -1):  # order k+1 -> continuation counts of order k
            left: dict[tuple[str, ...], set[str]] = defaultdict(set)
            for g in grams[k]:
                left[g[1:]].add(g[0])
            for suffix, before in left.items():  # never starts with <s>: nothing comes before it
                grams[k - 1][suffix] = len(before)
        counts: list[dict[tuple[str, ...], Counter]] = [defaultdict(Counter) for _ in range(order)]
        for k, by_gram in enumerate(grams):
            for g, c in by_gram.items():
                if c > 0:
                    counts[k][g[:-1]][g[-1]] = c
        vocab = frozenset(w for g in grams[0] for w in g if w != BOS)
        return cls(order, [dict(c) for c in counts], vocab, n_sent, n_tok)

    def _gamma_numerator(self, k: int, nxt: Counter) -> float:
        d1, d2, d3 = self._d[k]
        return sum(d1 if c == 1 else d2 if c == 2 else d3 for c in nxt.values())

    def _discount(self, k: int, c: int) -> float:
        d1, d2, d3 = self._d[k]
        return d1 if c == 1 else d2 if c == 2 else d3

    def prob(self, word: str, context: Sequence[str]) -> float:
        """P(word | context), the context's last `order - 1` words counting; an unknown word is <unk>."""
        w = word if word in self.vocab else UNK
        p = 1.0 / (len(self.vocab) + 1)  # the uniform level: the vocabulary and <unk>
        ctx = tuple(context)[max(0, len(context) - self.order + 1):]
        for k in range(self.order):  # unigrams up to the full context
            if k > len(ctx):
                break
            h = ctx[len(ctx) - k:] if k else ()
            seen = self._ctx[k].get(h)
            if seen is None:
                continue  # an unseen context backs off whole
            total, gamma_num = seen
            c = self._counts[k][h].get(w, 0)
            p = max(c - self._discount(k, c), 0.0) / total + gamma_num / total * p
        return p

    def score(self, text: str) -> NgramScore:
        """ln P of the text's words and </s>, each given at most `order - 1` words before it (from <s>)."""
        toks = [BOS, *words(text), EOS]
        logp = sum(math.log(self.prob(toks[i], toks[:i])) for i in range(1, len(toks)))
        n = len(toks) - 1
        return NgramScore(logp, logp / n, n)

    def score_texts(self, texts: list[str]) -> list[NgramScore]:
        return [self.score(t) for t in texts]

    def arpa_entries(self) -> list[dict[tuple[str, ...], tuple[float, float | None]]]:
        """Per order (1..n): n-gram -> (log10 P(last word | the others), log10 backoff weight or None), the same model
        as a backoff LM: every n-gram seen at its level and every context (with its interpolation weight gamma as
        its backoff weight), <s> with -99 (never predicted) and <unk> with the uniform level's share."""
        entries: list[dict[tuple[str, ...], tuple[float, float | None]]] = [{} for _ in range(self.order)]
        for k in range(self.order):
            grams = {(*h, w) for h, nxt in self._counts[k].items() for w in nxt}
            if k + 1 < self.order:
                grams |= set(self._ctx[k + 1])  # every context of the next level is an n-gram of this one
            if k == 0:
                grams |= {(UNK,), (BOS,)}
            for g in grams:
                lp = -99.0 if g == (BOS,) else math.log10(self.prob(g[-1], g[:-1]))
                seen = self._ctx[k + 1].get(g) if k + 1 < self.order else None
                bow = None if seen is None else math.log10(seen[1] / seen[0]) if seen[1] > 0 else -99.0
                entries[k][g] = (lp, bow)
        return entries

    def write_arpa(self, path: str | Path) -> None:
        """The model as an ARPA file (log10 values to 7 significant digits: its scores match `score` to ~1e-6)."""
        entries = self.arpa_entries()
        lines = ["\\data\\", *(f"ngram {k + 1}={len(e)}" for k, e in enumerate(entries)), ""]
        for k, e in enumerate(entries):
            lines.append(f"\\{k + 1}-grams:")
            for g in sorted(e):
                lp, bow = e[g]
                lines.append(f"{lp:.7g}\t{' '.join(g)}" + ("" if bow is None else f"\t{bow:.7g}"))
            lines.append("")
        lines.append("\\end\\")
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")

    def describe(self) -> str:
        return (f"{self.order}-gram Kneser-Ney LM: {self.sentences:,} sentences, {self.tokens:,} words, "
                f"vocabulary {len(self.vocab) - 1:,}")
