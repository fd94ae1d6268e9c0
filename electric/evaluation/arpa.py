"""A backoff n-gram LM read from a standard ARPA file: what the server scores a hypothesis with beside the model.

    lm = ArpaLM.read("models/my-domain/ngram.arpa")     # NgramError in one line when it does not parse
    lm.score("show me flights to boston")               # NgramScore: ln P(show me flights to boston </s>)

ARPA is the text format KenLM, SRILM, Kaldi and ESPnet read and write: for each order, one line per n-gram with
its log10 probability and (below the highest order) its log10 backoff weight. The probability of a word w after a
context h (its last `order - 1` words; a sentence starts with <s> and ends with </s>) is

    log P(w | h) = logp(h w)                       when the n-gram h w is listed
                 = bow(h) + log P(w | h')          otherwise (h' is h without its first word; bow 0 when h is not
                                                   listed), down to the unigrams, where an unknown word is <unk>

`electric.evaluation.ngram.KneserNeyLM.write_arpa` writes its interpolated Kneser-Ney model this way, exactly (the
interpolation weight of a context is its backoff weight), so this reader gives the scores the trainer gives.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

BOS, EOS, UNK = "<s>", "</s>", "<unk>"
_WORD = re.compile(r"\w+(?:'\w+)*|[^\w\s]")
LN10 = math.log(10.0)


class NgramError(ValueError):
    """An ARPA file that cannot be read or does not parse, in one line naming the file and the line."""


def words(text: str) -> list[str]:
    """The LM's tokens of a text: lower-cased words (apostrophes kept inside them) and punctuation marks."""
    return _WORD.findall(text.lower())


@dataclass
class NgramScore:
    """One text's n-gram score (what `electric.evaluation.nbest.ScoredLists` takes): the sum of ln P over its words
    and </s>, their mean, and how many there were."""

    score: float
    mean: float
    num_tokens: int


class ArpaLM:
    """A backoff LM over words from an ARPA file (the module's docstring has the rule). Build with `read`."""

    def __init__(self, order: int, logp: dict[tuple[str, ...], float], bow: dict[tuple[str, ...], float],
                 path: str = "<memory>"):
        if UNK not in {g[0] for g in logp if len(g) == 1}:
            raise NgramError(f"{path}: the unigrams have no {UNK} entry (an unknown word would have no probability)")
        self.order, self.path = order, path
        self._logp, self._bow = logp, bow  # log10 values, as in the file

    @classmethod
    def read(cls, path: str | Path) -> ArpaLM:
        """The LM in an ARPA file; NgramError naming the file (and the line) when it is missing or does not parse."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise NgramError(f"{p}: cannot read it ({e.strerror or e})") from None
        except UnicodeDecodeError as e:
            raise NgramError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        return cls.parse(text, str(p))

    @classmethod
    def parse(cls, text: str, path: str = "<memory>") -> ArpaLM:
        lines = text.splitlines()
        declared: dict[int, int] = {}
        logp: dict[tuple[str, ...], float] = {}
        bow: dict[tuple[str, ...], float] = {}
        section: str | int | None = None
        i = 0

        def fail(why: str) -> NgramError:
            return NgramError(f"{path}: line {i + 1}: {why} (not an ARPA n-gram file?)")

        for i, raw in enumerate(lines):  # noqa: B007 - `fail` reads i
            line = raw.strip()
            if not line:
                continue
            if line == "\\data\\":
                section = "data"
            elif line == "\\end\\":
                section = "end"
                break
            elif line.startswith("\\") and line.endswith("-grams:"):
                try:
                    section = int(line[1:-len("-grams:")])
                except ValueError:
                    raise fail(f"a section header {line!r}") from None
                if section not in declared:
                    raise fail(f"a {section}-gram section the \\data\\ header does not declare")
            elif section == "data":
                m = re.fullmatch(r"ngram\s+(\d+)\s*=\s*(\d+)", line)
                if m is None:
                    raise fail(f"expected 'ngram N=COUNT' in the \\data\\ header, got {line!r}")
                declared[int(m[1])] = int(m[2])
            elif isinstance(section, int):
                parts = line.split()
                n = section
                if len(parts) not in (n + 1, n + 2):
                    raise fail(f"a {n}-gram line has {len(parts)} fields, expected {n + 1} or {n + 2}")
                try:
                    lp = float(parts[0])
                    b = float(parts[n + 1]) if len(parts) == n + 2 else None
                except ValueError:
                    raise fail("a probability or backoff weight that is not a number") from None
                gram = tuple(parts[1: n + 1])
                logp[gram] = lp
                if b is not None:
                    bow[gram] = b
            else:
                raise fail(f"text outside any section: {line[:40]!r}")
        if section != "end":
            raise NgramError(f"{path}: no \\end\\ line (the file is cut short, or not an ARPA n-gram file)")
        if not declared or 1 not in declared:
            raise NgramError(f"{path}: no \\data\\ header with 1-grams (not an ARPA n-gram file)")
        for n, count in declared.items():
            got = sum(1 for g in logp if len(g) == n)
            if got != count:
                raise NgramError(f"{path}: the header declares {count:,} {n}-grams, the file lists {got:,}")
        return cls(max(declared), logp, bow, path)

    def log10_prob(self, word: str, context: tuple[str, ...]) -> float:
        """log10 P(word | context), by backing off (the module's rule); `context` its last order - 1 words."""
        if (word,) not in self._logp:
            word = UNK
        total = 0.0
        ctx = context[max(0, len(context) - self.order + 1):]
        while True:
            lp = self._logp.get((*ctx, word))
            if lp is not None:
                return total + lp
            total += self._bow.get(ctx, 0.0)
            ctx = ctx[1:]

    def score(self, text: str) -> NgramScore:
        """ln P of the text's words and </s>, each given at most `order - 1` words before it (from <s>)."""
        toks = (BOS, *words(text), EOS)
        log10p = sum(self.log10_prob(toks[i], toks[max(0, i - self.order + 1): i]) for i in range(1, len(toks)))
        n = len(toks) - 1
        return NgramScore(log10p * LN10, log10p * LN10 / n, n)

    def score_texts(self, texts: list[str]) -> list[NgramScore]:
        return [self.score(t) for t in texts]

    def describe(self) -> str:
        counts = [sum(1 for g in self._logp if len(g) == n) for n in range(1, self.order + 1)]
        return f"{self.order}-gram ARPA LM ({', '.join(f'{c:,}' for c in counts)} n-grams)"
