"""What each route does after the forward pass, per input, as pure functions.

`post_score`, `post_detect`, `post_classify` and `post_tags` make the function that turns one input's row of logits
into its result, calling the library (`score_row`, `electra_detect`, `electric.inference.classify`) so the server
computes exactly what `electric score` computes; the engine reranks with `electric.evaluation.nbest.rerank_lists`,
as `electric rerank` does. (Before the forward pass, the batcher encodes with the library's
`electric.inference.encoding.encode_requests`.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from electric.inference import classify
from electric.inference.calibration import Calibration
from electric.inference.scoring import electra_detect, score_row

Post = Callable[[Any, np.ndarray], Any]  # (one input's encoding, its row of logits) -> its result


def post_score(method: str, per_token: bool) -> Post:
    """The served method's score of one text (a discriminator's Electric PLL, a cloze model's cloze score)."""
    return lambda enc, row: score_row(enc, row, method, per_token)


def post_detect(calibration: Calibration | None) -> Post:
    """ELECTRA replaced-token probabilities of one text (calibrated when the export is)."""
    return lambda enc, row: electra_detect(enc, row, calibration)


def post_classify(labels: list[str], regression: bool) -> Post:
    """Label probabilities (or a regression value) of one text or pair."""
    return lambda enc, row: classify.classify_row(labels, regression, row, enc.truncated)


def post_tags(labels: list[str]) -> Post:
    """Per-token labels of one text."""
    return lambda enc, row: classify.tag_row(labels, enc, row)
