"""A call as requests that fit the server's limits, and the requests' answers as the call's results, in input order.

`/info` says the limits: at most `max_inputs_per_request` inputs (texts, pairs, or all the hypotheses of the n-best
lists) and `max_body_bytes` bytes a request (HTTP body or gRPC message). A call's inputs are cut, in order, into
requests of about equal size - as many as the client sends at once, so a call keeps the server as busy as the
client may, but none of fewer than MIN_PER_REQUEST inputs (a request's own cost, the client's and the server's, is
then small beside its inputs') and none of more than the limits allow - each naming where its inputs start in the
call (`offset`), so that a refusal names the call's input. An input that cannot fit a request even alone is refused before anything
is sent (`RejectedInput` naming it). Transport-neutral: a request is the HTTP JSON body; gRPC converts it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from electric.client.errors import RejectedInput
from electric.client.info import Limits, ServerInfo
from electric.results import Classification, Detection, RerankedList, TextScore

CALLS = ("score", "detect", "rerank", "classify")
# a call is not cut into requests of fewer inputs than this (unless the server's limit is lower): at 16 a request,
# HTTP cost `electric score --server` three times the CPU per text of 64 (benchmarks/bench_client.py)
MIN_PER_REQUEST = 64
REQUEST_OVERHEAD = 1024  # bytes a request keeps for what is not an input: field names, flags, weights
STRING_OVERHEAD = 8  # bytes a string may take beyond its JSON text in a gRPC message (tag and length)


def json_bytes(obj: object) -> bytes:
    """A body as the client sends it: compact UTF-8 JSON; NaN and infinities are a ValueError."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True)
class Request:
    call: str  # one of CALLS
    payload: dict[str, Any] | None  # the HTTP body of its route (None: GET /info)
    offset: int  # the position of its first input among the call's


@dataclass(frozen=True)
class Plan:
    """One call: its inputs (`items`), the body of a request holding some of them, what each costs (`size` bytes,
    `count` inputs), how one answer's results are read, and what an input is called in errors (`name`)."""

    call: str
    items: list[Any]
    body: Callable[[list[Any]], dict[str, Any]]
    size: Callable[[Any], int]
    read: Callable[[dict[str, Any]], Any]
    name: Callable[[int], str]
    count: Callable[[Any], int] = lambda item: 1

    def requests(self, where: str, limits: Limits, concurrency: int) -> list[Request]:
        """The call's inputs cut into requests within `limits`, about `concurrency` of them or more."""
        counts = [self.count(x) for x in self.items]
        total = sum(counts)
        per_request = min(limits.max_inputs_per_request,
                          max(MIN_PER_REQUEST, math.ceil(total / max(1, concurrency))))
        if total:  # as few requests as that allows, the inputs shared evenly among them (100 texts: 50 and 50)
            per_request = math.ceil(total / math.ceil(total / per_request))
        budget = limits.max_body_bytes - REQUEST_OVERHEAD
        out, start, n, size = [], 0, 0, 0
        for i, (item, k) in enumerate(zip(self.items, counts, strict=True)):
            b = self.size(item)
            if k > limits.max_inputs_per_request:
                raise RejectedInput(where, f"{self.name(i)} has {k} inputs, more than the server takes in one request "
                                           f"(max_inputs_per_request {limits.max_inputs_per_request})", index=i)
            if b > budget:
                raise RejectedInput(where, f"{self.name(i)} takes {b} bytes, more than a request to the server may hold "
                                           f"(max_body_bytes {limits.max_body_bytes}, less {REQUEST_OVERHEAD} for "
                                           "the rest of the request)", index=i)
            if i > start and (n + k > per_request or size + b > budget):
                out.append(Request(self.call, self.body(self.items[start:i]), start))
                start, n, size = i, 0, 0
            n, size = n + k, size + b
        if start < len(self.items):
            out.append(Request(self.call, self.body(self.items[start:]), start))
        return out

    def results(self, answers: Sequence[dict[str, Any]]) -> list[Any]:
        return [self.read(r) for a in answers for r in a["results"]]


def _text_size(text: str) -> int:
    return len(json_bytes(text)) + 1 + STRING_OVERHEAD


def _texts(texts: object, what: str = "texts") -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Iterable):
        raise TypeError(f"{what}: expected a list of texts, got {'one string' if isinstance(texts, str) else texts!r}")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{what}[{i}] is a {type(t).__name__}, expected a string")
    return out


def score(texts: Sequence[str], method: str | None, per_token: bool, truncate: bool, info: ServerInfo) -> Plan:
    """/v1/score; or, for `method` "electra" on a server whose /v1/score gives another, /v1/detect's totals (the
    ELECTRA score sum_t log(1 - p_t) is the detection's score)."""
    texts = _texts(texts)
    served = info.method
    if method is None or method == served:
        return Plan("score", texts, lambda xs: {"texts": xs, "per_token": per_token, "truncate": truncate},
                    _text_size, TextScore.from_dict, lambda i: f"input {i}")
    if method == "electra" and info.detects:
        if per_token:
            raise ValueError("per-token ELECTRA scores come from detect(): each token's replaced probability p_t")
        return Plan("detect", texts, lambda xs: {"texts": xs, "per_token": False, "truncate": truncate},
                    _text_size, _electra_score, lambda i: f"input {i}")
    raise ValueError(f"method {method!r}: this server scores with {served or 'no scoring model'}"
                     + (" (and electra, from its detector)" if info.detects and served != "electra" else ""))


def _electra_score(d: dict[str, Any]) -> TextScore:
    return TextScore(d["text"], float(d["score"]), float(d["mean"]), int(d["num_tokens"]), "electra",
                     bool(d.get("truncated", False)))


def detect(texts: Sequence[str], per_token: bool, truncate: bool) -> Plan:
    return Plan("detect", _texts(texts), lambda xs: {"texts": xs, "per_token": per_token, "truncate": truncate},
                _text_size, Detection.from_dict, lambda i: f"input {i}")


def _nbest(x: object, i: int) -> dict[str, Any]:
    """One n-best list as /v1/rerank takes it: hypotheses, optional first-pass scores, an id (its position in the call
    when it has none, as one request of all the lists would have echoed)."""
    if isinstance(x, Mapping):
        hyps, scores, utt_id = x.get("hypotheses"), x.get("scores"), x.get("id")
    elif hasattr(x, "hyps"):  # electric.evaluation.nbest.NBestList
        hyps, scores, utt_id = x.hyps, getattr(x, "first_pass_scores", None), getattr(x, "utt_id", None)
    else:
        hyps, scores, utt_id = x, None, None
    body: dict[str, Any] = {"id": str(i) if utt_id is None else str(utt_id),
                            "hypotheses": _texts(hyps, f"lists[{i}].hypotheses")}
    if scores is not None:
        body["scores"] = [float(s) for s in scores]
    return body


def _weights(weights: object) -> dict[str, Any] | None:
    if weights is None:
        return None
    if hasattr(weights, "to_dict"):  # electric.evaluation.nbest.Weights
        weights = weights.to_dict()
    if not isinstance(weights, Mapping):
        raise TypeError(f"weights: expected a mapping (lm, length, beta, prior, piece, lm_score), got "
                        f"{type(weights).__name__}")
    return {k: v for k, v in weights.items() if v is not None}


def rerank(lists: Sequence[object], weights: object, truncate: bool) -> Plan:
    items = [_nbest(x, i) for i, x in enumerate(lists)]
    given = _weights(weights)

    def body(xs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"lists": xs, "truncate": truncate, **({"weights": given} if given else {})}

    return Plan("rerank", items, body,
                lambda x: len(json_bytes(x)) + 1 + STRING_OVERHEAD * (len(x["hypotheses"]) + 2)
                + STRING_OVERHEAD * len(x.get("scores") or ()),
                RerankedList.from_dict, lambda i: f"lists[{i}]", count=lambda x: len(x["hypotheses"]))


def classify(inputs: Sequence[str] | Sequence[tuple[str, str]], model: str | None, truncate: bool) -> Plan:
    """Texts, or pairs of texts (each a tuple or list of two)."""
    if isinstance(inputs, str):
        raise TypeError("inputs: expected a list of texts or of pairs, got one string")
    items: list[Any] = list(inputs)
    pairs = bool(items) and not isinstance(items[0], str)
    extra = {"truncate": truncate, **({"model": model} if model else {})}
    if not pairs:
        return Plan("classify", _texts(items), lambda xs: {"texts": xs, **extra}, _text_size,
                    Classification.from_dict, lambda i: f"input {i}")
    for i, p in enumerate(items):
        if isinstance(p, str) or len(p) != 2:
            raise TypeError(f"pairs[{i}]: expected a pair of two texts")
        _texts(p, f"pairs[{i}]")
    return Plan("classify", [list(p) for p in items], lambda xs: {"pairs": xs, **extra},
                lambda p: _text_size(p[0]) + _text_size(p[1]) + STRING_OVERHEAD, Classification.from_dict,
                lambda i: f"pairs[{i}]")
