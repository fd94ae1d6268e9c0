"""Admission by work: whether a request can finish within its deadline, counted in model work, not requests.

A request's work is the sum over its inputs of `cost(L) = L * (1 + L / (6 * H))` for an input of L tokens on a
model of hidden size H: a layer's dense parts take ~12·L·H² multiply-adds, its attention ~2·L²·H, so a 512-token
input costs ~50 times a 16-token one on `tiny` (H = 128), not 32 (tokens) or 1,024 (tokens × positions). Each
model slot measures the rate it gets through that work (`WorkRate`: units a second over its recent batches), and
the batcher serves requests round robin (server/batcher.py), so a new request of work w shares the model with
every admitted request j until the smaller of the two is done: it should finish after

    (w + sum_j min(w_j, w)) / rate     seconds,  w_j = what remains of request j.

A request predicted to finish after its deadline (`DEADLINE_SHARE` of request_timeout_s) is refused at once with
`Overloaded` (429 / RESOURCE_EXHAUSTED, with Retry-After: when what is ahead of it should have drained) instead of
being queued, computed and dropped at the deadline. Small requests are refused only when the server is far behind:
their share of the others' work is their own size. A request is never refused when the model has nothing else to
do (it then runs, and times out if it is larger than the deadline allows).

Over HTTP a body over BIG_BODY_BYTES is refused the same way before it is even read when the work already admitted
alone would take the model past the deadline (`check_backlog`): a client that resends refused megabytes at once then
costs the server what its headers cost, not a parse of each body.

Before tokenisation a request's work is estimated from its characters (`Estimator`: the slot's running characters
per token, tokens capped at the served length); once tokenised, its work is counted exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from server.errors import Overloaded

DEADLINE_SHARE = 0.8  # of request_timeout_s: the rest is left for tokenisation, post-processing and the network
RATE_DECAY = 0.8  # weight of the previous batches in the measured rate, a batch at a time
CHARS_PER_TOKEN = 4.0  # the first estimate, before any text was tokenised (English WordPiece: 4-5)


def cost(length: int, hidden_size: int) -> float:
    """Work units of one input of `length` tokens on a model of `hidden_size`: dense layers ∝ L, attention ∝ L²."""
    return length * (1.0 + length / (6.0 * hidden_size))


class WorkRate:
    """Work units a second that one model gets through, over its recent batches (weighted by their duration)."""

    def __init__(self):
        self.units = 0.0
        self.seconds = 0.0

    def add(self, units: float, seconds: float) -> None:
        self.units = RATE_DECAY * self.units + units
        self.seconds = RATE_DECAY * self.seconds + seconds

    @property
    def per_second(self) -> float | None:
        """None until a batch was measured."""
        return self.units / self.seconds if self.seconds > 0 else None


class Estimator:
    """A request's work before it is tokenised: characters / (the slot's running characters per token), + 2 for
    [CLS] and [SEP], at most the served length, per input."""

    def __init__(self, hidden_size: int, max_tokens: int):
        self.hidden_size, self.max_tokens = hidden_size, max_tokens
        self.chars_per_token = CHARS_PER_TOKEN

    def estimate(self, char_counts: Iterable[int]) -> float:
        return sum(cost(min(self.max_tokens, math.ceil(n / self.chars_per_token) + 2), self.hidden_size)
                   for n in char_counts)

    def exact(self, lengths: Iterable[int]) -> float:
        return sum(cost(n, self.hidden_size) for n in lengths)

    def observe(self, chars: int, tokens: int) -> None:
        """A tokenisation round of `chars` characters gave `tokens` tokens (special tokens left out)."""
        if chars > 0 and tokens > 0:
            self.chars_per_token = 0.8 * self.chars_per_token + 0.2 * max(1.0, chars / tokens)


def input_chars(x: str | tuple[str, str]) -> int:
    """Characters of one input: a text, or both sides of a pair."""
    return len(x) if isinstance(x, str) else len(x[0]) + len(x[1])


def _refuse_past(seconds: float, deadline_s: float, why: str, hint: str = "") -> None:
    """Overloaded (with Retry-After) when `seconds` of model time is past DEADLINE_SHARE of `deadline_s`; `why` may
    name {seconds}."""
    budget = DEADLINE_SHARE * deadline_s
    if seconds > budget:
        wait = math.ceil(seconds - budget)
        raise Overloaded(f"the model is busy: {why.format(seconds=seconds)}, past the deadline of {deadline_s:g} s "
                         f"(request_timeout_s); retry in ~{wait} s{hint}", retry_after=wait)


def check_deadline(work: float, others: Iterable[float], rate: WorkRate, deadline_s: float) -> None:
    """Overloaded when a request of `work` units, sharing the model round robin with requests that have `others`
    units left, is predicted to finish after `deadline_s` (the transports answer 429 with Retry-After, or
    RESOURCE_EXHAUSTED)."""
    per_second = rate.per_second
    others = [w for w in others if w > 0]
    if per_second is None or not others:
        return
    finish = (work + sum(min(w, work) for w in others)) / per_second
    _refuse_past(finish, deadline_s, f"behind {len(others)} others this request would finish in ~{{seconds:.0f}} s",
                 ", or send fewer or shorter inputs")


BIG_BODY_BYTES = 64 << 10  # a body this large carries tens of thousands of characters: likely big work


def check_backlog(others: Iterable[float], rate: WorkRate, deadline_s: float) -> None:
    """Overloaded when the work already admitted (`others`, units left) alone takes the model past `deadline_s`:
    then a big request would not finish in time whatever it holds, and is refused before its body is read."""
    per_second = rate.per_second
    if per_second is not None:
        _refuse_past(sum(w for w in others if w > 0) / per_second, deadline_s,
                     "~{seconds:.0f} s of admitted work is ahead of a large request")
