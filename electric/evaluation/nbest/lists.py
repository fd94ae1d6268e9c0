"""An n-best list (`NBestList`), its formats and the error a malformed file raises."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

FORMATS = ("hyporadise", "espnet", "text")
SCORE_KEYS = ("score", "am_score")  # HyPoradise first-pass score fields, in order of preference


class NBestError(ValueError):
    """A malformed n-best file; the message names the file and the utterance."""

    def __init__(self, path: str | Path | None, message: str, utt: str | None = None):
        self.path, self.utt = path, utt
        where = str(path) if path is not None else "n-best input"
        super().__init__(f"{where}: {'utterance ' + utt + ': ' if utt is not None else ''}{message}")


@dataclass
class NBestList:
    utt_id: str
    hyps: list[str]
    first_pass_scores: list[float] | None = None  # higher = better, one per hypothesis
    ref: str | None = None
    extra: dict = field(default_factory=dict)  # unknown utterance-level fields, kept on round trip
    hyp_extra: list[dict] | None = None  # unknown per-hypothesis fields, kept on round trip and reordered
    score_key: str | None = None  # the field the first-pass scores came from ("score" or "am_score")

    def __post_init__(self):
        if self.first_pass_scores is not None and len(self.first_pass_scores) != len(self.hyps):
            raise NBestError(None, f"{len(self.first_pass_scores)} first-pass scores for {len(self.hyps)} "
                                   "hypotheses", self.utt_id)

    def reordered(self, order: Sequence[int]) -> NBestList:
        """The same list with hypotheses (and their scores and fields) in `order`."""
        return replace(
            self,
            hyps=[self.hyps[i] for i in order],
            first_pass_scores=None if self.first_pass_scores is None else [self.first_pass_scores[i] for i in order],
            hyp_extra=None if self.hyp_extra is None else [self.hyp_extra[i] for i in order],
            extra=dict(self.extra),
        )
