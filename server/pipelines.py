"""What each route does before and after the forward pass, per input, as pure functions.

Scoring and detection call the library (`electric.inference.scoring.from_encoding`, as `encode` does, then
`electric_score`, `electra_detect`) so the server computes exactly what `electric score` computes; the engine reranks with
`electric.evaluation.nbest.rerank_lists`, as `electric rerank` does.
Classification post-processing (softmax over labels, regression value, per-token tags) lives here
because no CLI command computes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from electric.inference.scoring import Encoded, InputTooLongError, from_encoding, rust_tokenizer


@dataclass
class PairEncoded:
    """A text pair: [CLS] a [SEP] b [SEP] with token type ids 0 / 1 (as the fine-tuning tokenizer makes it)."""

    index: int
    input_ids: np.ndarray  # (T,) int64
    token_type_ids: np.ndarray  # (T,) int64
    truncated: bool = False

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])


def encode_requests(tokenizer, requests: Sequence[tuple[Sequence[str | tuple[str, str]], bool]],
                    max_length: int) -> list[list[Encoded | PairEncoded] | InputTooLongError]:
    """Tokenise the inputs of many requests - each (inputs, truncate), the inputs all texts or all (a, b)
    pairs - with ONE call of the Rust batch encoder. Per request: its `Encoded` / `PairEncoded` items, or
    the `InputTooLongError` of its first input over `max_length` tokens when it did not ask to truncate.
    Texts are encoded as `electric.inference.scoring.encode` does them (truncation keeps the first pieces); pairs as
    fine-tuning does (token type ids 0 / 1, longest-first truncation)."""
    flat = [x if isinstance(x, str) else tuple(x) for inputs, _ in requests for x in inputs]
    encodings = rust_tokenizer(tokenizer).encode_batch(flat, add_special_tokens=True) if flat else []
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    out: list = []
    k = 0
    for inputs, truncate in requests:
        mine, k = encodings[k: k + len(inputs)], k + len(inputs)
        try:
            out.append([from_encoding(e, x, i, max_length, truncate=truncate, cls_id=cls_id, sep_id=sep_id)
                        if isinstance(x, str) else _pair(tokenizer, e, x, i, max_length, truncate)
                        for i, (x, e) in enumerate(zip(inputs, mine, strict=True))])
        except InputTooLongError as err:
            out.append(err)
    return out


def _pair(tokenizer, e, pair: tuple[str, str], index: int, max_length: int, truncate: bool) -> PairEncoded:
    ids, tt, truncated = e.ids, e.type_ids, False
    if len(ids) > max_length:
        if not truncate:
            raise InputTooLongError(index, len(ids), max_length)
        cut = rust_tokenizer(tokenizer, max_length).encode(pair[0], pair[1], add_special_tokens=True)
        ids, tt, truncated = cut.ids, cut.type_ids, True
    return PairEncoded(index, np.asarray(ids, dtype=np.int64), np.asarray(tt, dtype=np.int64), truncated)


# ---- classification ------------------------------------------------------------------------------

@dataclass
class TokenLabel:
    token: str
    start: int
    end: int
    label: str
    probability: float


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


def label_names(config: dict) -> list[str]:
    """Label names in id order from a config.json's id2label (keys may be strings)."""
    id2label = config.get("id2label") or {}
    n = int(config.get("num_labels") or len(id2label) or 2)
    return [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(n)]


def is_regression(config: dict, num_outputs: int) -> bool:
    return config.get("problem_type") == "regression" or num_outputs == 1


def _softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def classify_row(labels: list[str], regression: bool, logits: np.ndarray, truncated: bool = False) -> Classification:
    """(C,) logits of one input -> label probabilities, or the value of a regression head."""
    logits = np.asarray(logits).reshape(-1)
    if regression:
        return Classification(label=None, value=float(logits[0]), truncated=truncated)
    p = _softmax(logits)
    return Classification(label=labels[int(p.argmax())], probabilities={lab: float(q) for lab, q in zip(labels, p,
                                                                                                       strict=True)},
                          truncated=truncated)


def tag_row(labels: list[str], encoded: Encoded, logits: np.ndarray) -> Classification:
    """(T, C) logits of one text -> a label per word piece and per word (its first piece, as in training)."""
    logits = np.asarray(logits)[: encoded.length]  # (T, C)
    p = _softmax(logits)  # (T, C)
    best = p.argmax(axis=-1)  # (T,)
    tokens, words, seen = [], [], set()
    for t in np.flatnonzero(encoded.candidates):
        start, end = int(encoded.offsets[t, 0]), int(encoded.offsets[t, 1])
        lab, prob = labels[int(best[t])], float(p[t, best[t]])
        tokens.append(TokenLabel(encoded.tokens[t], start, end, lab, prob))
        w = encoded.word_ids[t]
        if w is not None and w not in seen:
            seen.add(w)
            pieces = [k for k in np.flatnonzero(encoded.candidates) if encoded.word_ids[k] == w]
            w_end = int(encoded.offsets[pieces, 1].max())
            words.append(TokenLabel(encoded.text[start:w_end], start, w_end, lab, prob))
    return Classification(label=None, tokens=tokens, words=words, truncated=encoded.truncated)

