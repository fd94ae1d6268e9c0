"""What scoring gives back, as plain values: a text's score, a detection, a reranked n-best list, a classification.

The library returns them (`electric.inference.scoring`, `electric.inference.classify`,
`electric.evaluation.nbest`), the server answers with their `to_dict()` as JSON (and the same fields in protobuf),
and `electric.client` builds them back with `from_dict`: one type per result, whichever side computed it.
Standard library only, so a client-only install needs nothing more.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class TokenScore:
    token: str  # the piece, e.g. "##o"
    start: int  # character span of the piece in the text
    end: int
    score: float  # this token's share of the sentence score

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TokenScore:
        return cls(d["token"], int(d["start"]), int(d["end"]), float(d["score"]))


@dataclass
class TextScore:
    text: str
    score: float  # sentence score: higher = more likely (sum over candidate tokens)
    mean: float  # score / num_tokens (0 for an empty text)
    num_tokens: int  # candidate tokens scored
    method: str = "electric"
    truncated: bool = False
    tokens: list[TokenScore] | None = None  # with per_token=True
    ngram: float | None = None  # the n-gram LM's ln P(text), when asked for (a model directory that carries one)

    def to_dict(self) -> dict:
        """The fields, without `truncated` when False and `tokens` and `ngram` when None (built directly: asdict's
        deep copy costs more than the rest of a server response)."""
        d = {"text": self.text, "score": self.score, "mean": self.mean, "num_tokens": self.num_tokens,
             "method": self.method}
        if self.truncated:
            d["truncated"] = True
        if self.tokens is not None:
            d["tokens"] = [vars(t).copy() for t in self.tokens]
        if self.ngram is not None:
            d["ngram"] = self.ngram
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TextScore:
        """The inverse of `to_dict` (`tokens` and `ngram` None when absent)."""
        tokens, ngram = d.get("tokens"), d.get("ngram")
        return cls(d["text"], float(d["score"]), float(d["mean"]), int(d["num_tokens"]), d.get("method", "electric"),
                   bool(d.get("truncated", False)), None if tokens is None else [TokenScore.from_dict(t) for t in tokens],
                   None if ngram is None else float(ngram))


@dataclass
class TokenDetection:
    token: str
    start: int
    end: int
    prob: float  # p_t: probability that this piece was replaced (calibrated; sigma(s_t) without a calibration)
    logit: float  # s_t, the discriminator's raw output

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TokenDetection:
        return cls(d["token"], int(d["start"]), int(d["end"]), float(d["prob"]), float(d["logit"]))


@dataclass
class WordDetection:
    word: str  # text[start:end]
    start: int
    end: int
    max_prob: float  # max over the word's pieces
    mean_prob: float  # mean over the word's pieces
    num_pieces: int

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WordDetection:
        return cls(d["word"], int(d["start"]), int(d["end"]), float(d["max_prob"]), float(d["mean_prob"]),
                   int(d["num_pieces"]))


@dataclass
class Detection:
    text: str
    score: float  # sum_t log(1 - p_t): log-probability that nothing was replaced
    mean: float
    num_tokens: int
    tokens: list[TokenDetection] = field(default_factory=list)
    words: list[WordDetection] = field(default_factory=list)
    truncated: bool = False

    def to_dict(self, per_token: bool = True) -> dict:
        d = {"text": self.text, "score": self.score, "mean": self.mean, "num_tokens": self.num_tokens}
        if per_token:
            d["tokens"] = [vars(t).copy() for t in self.tokens]
            d["words"] = [vars(w).copy() for w in self.words]
        if self.truncated:
            d["truncated"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Detection:
        """The inverse of `to_dict` (empty token and word lists when they were left out)."""
        return cls(d["text"], float(d["score"]), float(d["mean"]), int(d["num_tokens"]),
                   [TokenDetection.from_dict(t) for t in d.get("tokens") or ()],
                   [WordDetection.from_dict(w) for w in d.get("words") or ()], bool(d.get("truncated", False)))


@dataclass
class RerankedList:
    utt_id: str
    order: list[int]  # original indices, best first
    hyps: list[str]  # reordered
    total: list[float]  # combined score, in the new order
    prior: list[float]  # a(h)
    lm: list[float]
    words: list[int]
    tied: bool = False  # a hypothesis of another text has the best total too; the earlier position won
    pieces: list[int] | None = None  # the tokenizer pieces the LM scored, when known
    ngram: list[float] | None = None  # the n-gram LM's ln P of each hypothesis, when the combination used it

    def to_dict(self) -> dict:
        pieces = self.pieces if self.pieces is not None else [None] * len(self.hyps)
        ngram = self.ngram if self.ngram is not None else [None] * len(self.hyps)
        return {"utt_id": self.utt_id, "best": self.hyps[0], "order": self.order, "tied": self.tied, "hyps": [
            {"text": h, "rank": r, "total": t, "prior": a, "lm": s, "words": w,
             **({"pieces": n} if n is not None else {}), **({"ngram": g} if g is not None else {})}
            for h, r, t, a, s, w, n, g in zip(self.hyps, self.order, self.total, self.prior, self.lm, self.words,
                                              pieces, ngram, strict=True)]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RerankedList:
        """The inverse of `to_dict` (`pieces` and `ngram` None unless every hypothesis has them)."""
        hyps = d["hyps"]
        pieces = [int(h["pieces"]) for h in hyps] if all(h.get("pieces") is not None for h in hyps) else None
        ngram = [float(h["ngram"]) for h in hyps] if all(h.get("ngram") is not None for h in hyps) else None
        return cls(d["utt_id"], [int(h["rank"]) for h in hyps], [h["text"] for h in hyps],
                   [float(h["total"]) for h in hyps], [float(h["prior"]) for h in hyps],
                   [float(h["lm"]) for h in hyps], [int(h["words"]) for h in hyps], bool(d.get("tied", False)),
                   pieces, ngram)


@dataclass
class TokenLabel:
    token: str
    start: int
    end: int
    label: str
    probability: float

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TokenLabel:
        return cls(d["token"], int(d["start"]), int(d["end"]), d["label"], float(d["probability"]))


@dataclass
class Classification:
    label: str | None  # most probable label; None for a regression model
    probabilities: dict[str, float] = field(default_factory=dict)  # every label, in the model's order
    value: float | None = None  # regression models (one output)
    tokens: list[TokenLabel] | None = None  # token classifiers: one label per word piece
    words: list[TokenLabel] | None = None  # token classifiers: each word labelled by its first piece
    truncated: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("value", "tokens", "words"):
            if d[k] is None:
                del d[k]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Classification:
        """The inverse of `to_dict`."""
        tokens, words, value = d.get("tokens"), d.get("words"), d.get("value")
        return cls(d.get("label"), {k: float(v) for k, v in (d.get("probabilities") or {}).items()},
                   None if value is None else float(value),
                   None if tokens is None else [TokenLabel.from_dict(t) for t in tokens],
                   None if words is None else [TokenLabel.from_dict(w) for w in words], bool(d.get("truncated", False)))
