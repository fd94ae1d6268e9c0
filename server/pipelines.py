"""What each route does before and after the forward pass, per input, as pure functions.

Before: `encode_requests` tokenises a round of requests (texts as `electric.inference.encoding.encode` does them,
pairs as fine-tuning does). After: `post_score`, `post_detect`, `post_classify` and `post_tags` make the function
that turns one input's row of logits into its result, calling the library (`score_row`, `electra_detect`,
`electric.inference.classify`) so the server computes exactly what `electric score` computes; the engine reranks
with `electric.evaluation.nbest.rerank_lists`, as `electric rerank` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from electric.inference import classify
from electric.inference.calibration import Calibration
from electric.inference.encoding import (
    Encoded,
    InputTooLongError,
    encode_capped,
    from_encoding,
    rust_tokenizer,
)
from electric.inference.scoring import electra_detect, score_row

Post = Callable[[Any, np.ndarray], Any]  # (one input's encoding, its row of logits) -> its result


@dataclass
class PairEncoded:
    """A text pair: [CLS] a [SEP] b [SEP] with token type ids 0 / 1 (as the fine-tuning tokenizer makes it)."""

    index: int
    input_ids: np.ndarray  # (T,) int64
    token_type_ids: np.ndarray  # (T,) int64
    truncated: bool = False
    blank_side: int | None = None  # 0 or 1: a side the tokenizer kept nothing of (refused, as a blank text is)

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])


def encode_requests(tokenizer, requests: Sequence[tuple[Sequence[str | tuple[str, str]], bool]],
                    max_length: int) -> list[list[Encoded | PairEncoded] | InputTooLongError]:
    """Tokenise the inputs of many requests - each (inputs, truncate), the inputs all texts or all (a, b)
    pairs - with ONE call of the Rust batch encoder. Per request: its `Encoded` / `PairEncoded` items, or
    the `InputTooLongError` of its first input over `max_length` tokens when it did not ask to truncate.
    Texts are encoded as `electric.inference.encoding.encode` does them (truncation keeps the first pieces); pairs as
    fine-tuning does (token type ids 0 / 1, longest-first truncation)."""
    flat = [x if isinstance(x, str) else tuple(x) for inputs, _ in requests for x in inputs]
    encodings, cut = _encode(rust_tokenizer(tokenizer), flat, max_length)
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    out: list = []
    k = 0
    for inputs, truncate in requests:
        mine, k = zip(encodings[k: k + len(inputs)], cut[k: k + len(inputs)], strict=True), k + len(inputs)
        try:
            out.append([from_encoding(e, x, i, max_length, truncate=truncate, cls_id=cls_id, sep_id=sep_id, cut=c)
                        if isinstance(x, str) else _pair(tokenizer, e, c or x, i, max_length, truncate, c is not None)
                        for i, (x, (e, c)) in enumerate(zip(inputs, mine, strict=True))])
        except InputTooLongError as err:
            out.append(err)
    return out


def _encode(rust, flat: list, max_length: int) -> tuple[list, list]:
    """Encodings of texts and pairs that never tokenise much more of a long text than `max_length` tokens
    (`encode_capped`). A text's cut is True when only its prefix was encoded; a pair's is the pair it encoded
    (each side cut where `encode_capped` cut it: past max_length - 1 whole-word tokens), or None when whole."""
    encodings, cut = [None] * len(flat), [None] * len(flat)
    texts = [k for k, x in enumerate(flat) if isinstance(x, str)]
    if texts:
        for k, e, c in zip(texts, *encode_capped(rust, [flat[k] for k in texts], max_length), strict=True):
            encodings[k], cut[k] = e, c
    pairs = [k for k, x in enumerate(flat) if not isinstance(x, str)]
    if pairs:
        sides, side_cut = encode_capped(rust, [s for k in pairs for s in flat[k]], max_length)
        for j, k in enumerate(pairs):
            a, b = (s[: e.offsets[-2][1]] if c else s for s, e, c in zip(flat[k], sides[2 * j: 2 * j + 2],
                                                                         side_cut[2 * j: 2 * j + 2], strict=True))
            if (a, b) != flat[k]:
                flat[k] = cut[k] = (a, b)
        for k, e in zip(pairs, rust.encode_batch([flat[k] for k in pairs], add_special_tokens=True), strict=True):
            encodings[k] = e
    return encodings, cut


def _pair(tokenizer, e, pair: tuple[str, str], index: int, max_length: int, truncate: bool,
          cut: bool = False) -> PairEncoded:
    """The encoding `e` of `pair`; `cut`: `pair`'s sides are cut prefixes of the input's (`_encode`). Longest-first
    truncation of cut sides equals that of the whole ones, but for which side gets the odd token when both were
    cut."""
    ids, tt, truncated = e.ids, e.type_ids, False
    kept = {side for side, special in zip(tt, e.special_tokens_mask, strict=True) if not special}
    blank_side = next((side for side in (0, 1) if side not in kept), None)
    if len(ids) > max_length:
        if not truncate:
            raise InputTooLongError(index, len(ids), max_length, at_least=cut)
        cut = rust_tokenizer(tokenizer, max_length).encode(pair[0], pair[1], add_special_tokens=True)
        ids, tt, truncated = cut.ids, cut.type_ids, True
    return PairEncoded(index, np.asarray(ids, dtype=np.int64), np.asarray(tt, dtype=np.int64), truncated, blank_side)


# ---- after the forward pass ---------------------------------------------------------------------------

def post_score(method: str, per_token: bool) -> Post:
    """The served method's score of one text (a discriminator's Electric PLL, a cloze model's cloze score)."""
    return lambda enc, row: score_row(enc, row, method, per_token)


def post_detect(calibration: Calibration | None) -> Post:
    """ELECTRA replaced-token probabilities of one text (calibrated when the export is)."""
    return lambda enc, row: electra_detect(enc, row, calibration)


def post_classify(labels: Sequence[str], regression: bool) -> Post:
    """Label probabilities (or a regression value) of one text or pair."""
    return lambda enc, row: classify.classify_row(labels, regression, row, enc.truncated)


def post_tags(labels: Sequence[str]) -> Post:
    """Per-token labels of one text."""
    return lambda enc, row: classify.tag_row(labels, enc, row)
