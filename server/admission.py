"""Admission by work: whether a request can finish within its deadline, counted in model work, not requests.

A request's work is the sum over its inputs of `cost(L) = L * (1 + L / (6 * H))` for an input of L tokens on a
model of hidden size H: a layer's dense parts take ~12·L·H² multiply-adds, its attention ~2·L²·H, so a 512-token
input costs ~50 times a 16-token one on `tiny` (H = 128), not 32 (tokens) or 1,024 (tokens × positions). The
formula is a shape; the clock is measured: each model slot keeps the seconds a unit takes at each length bucket
(`Pace`, over its recent batches there; the start-up warm-up runs a batch at every bucket up to the served length,
so a 512-token request is never judged by the pace of 20-token ones). The batcher serves requests round robin
(server/batcher.py), so a new request of t seconds shares the model with every admitted request j until the smaller
of the two is done: it should finish after

    t + sum_j min(t_j, t)     seconds,  t_j = the time of what remains of request j.

A request predicted to finish after its deadline (`DEADLINE_SHARE` of request_timeout_s; `WARMUP_PACE_SHARE` while a
length it or the admitted work holds has been timed by the warm-up alone) is refused at once with
`Overloaded` (429 / RESOURCE_EXHAUSTED, with `retry_after_s`: when enough of what is ahead of it should have run) instead of
being queued, computed and dropped at the deadline. Small requests are refused only when the server is far behind:
their share of the others' work is their own size. A request is never refused when the model has nothing else to
do (it then runs, and times out if it is larger than the deadline allows).

Over HTTP a body over BIG_BODY_BYTES is refused the same way before it is even read when the work already admitted
alone would take the model past the deadline (`check_backlog`): a client that resends refused megabytes at once then
costs the server what its headers cost, not a parse of each body.

Before tokenisation a request's input lengths are estimated from its characters (`Estimator`: the slot's running
characters per token, tokens capped at the served length); once tokenised, its work is counted exactly.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence

import numpy as np

from electric.batching import length_bucket
from server.errors import Overloaded

DEADLINE_SHARE = 0.8  # of request_timeout_s: the rest is left for tokenisation, post-processing and the network
# the share while a length's pace comes from the warm-up alone: it ran on an idle machine, and the first requests of
# a burst run beside the burst's own parsing and clients (slower: bench_huge_inputs.py shows it at 512 tokens)
WARMUP_PACE_SHARE = 0.4
RATE_DECAY = 0.8  # weight of a length's previous batches in its measured pace, a batch at a time
CHARS_PER_TOKEN = 4.0  # the first estimate, before any text was tokenised (English WordPiece: 4-5)
MIN_RETRY_S = 0.05  # the shortest wait a refusal asks for: an estimate near 0 must not have clients retry at once


def cost(length: int, hidden_size: int) -> float:
    """Work units of one input of `length` tokens on a model of `hidden_size`: dense layers ∝ L, attention ∝ L²."""
    return length * (1.0 + length / (6.0 * hidden_size))


class Pace:
    """Seconds a unit of work takes on one model, measured per length bucket (electric.batching.length_bucket: up to
    16, 32, 64, ... tokens) over its recent batches: the cost formula is a shape, not a clock, and a model's time at
    512 tokens is not what its time at 20 says (memory traffic, softmax, padding). A request's work is a vector of
    units per bucket (`work`); its time is that vector against each bucket's pace (`seconds`), a bucket never measured
    taking the pace of the nearest longer one that was, else of the longest measured."""

    def __init__(self, hidden_size: int, max_tokens: int):
        self.hidden_size = hidden_size
        self.first = length_bucket(1)
        self.size = length_bucket(max_tokens) - self.first + 1
        self.units = np.zeros(self.size)  # decayed sums over each bucket's batches
        self.seconds_spent = np.zeros(self.size)
        self._per_unit: np.ndarray | None = None  # seconds_per_unit, until the next batch
        self.served = np.zeros(self.size, dtype=bool)  # a batch of requests (not only the warm-up's) ran there

    def index(self, length: int) -> int:
        return min(length_bucket(length) - self.first, self.size - 1)

    def lengths(self) -> list[int]:
        """The longest length of each bucket (the last one's is above max_tokens: callers cap it)."""
        return [2 ** (self.first + i) for i in range(self.size)]

    def work(self, lengths: Iterable[int]) -> np.ndarray:
        """Units per bucket of inputs of `lengths` tokens."""
        w = np.zeros(self.size)
        for n in lengths:
            w[self.index(n)] += cost(n, self.hidden_size)
        return w

    def add(self, lengths: Sequence[int], padded_length: int, seconds: float, served: bool = True) -> None:
        """A batch of inputs of `lengths`, padded to `padded_length`, ran in `seconds`: its bucket's pace (`served`:
        requests' inputs, not only the warm-up's)."""
        i = self.index(padded_length)
        self.served[i] |= served
        self.units[i] = RATE_DECAY * self.units[i] + sum(cost(n, self.hidden_size) for n in lengths)
        self.seconds_spent[i] = RATE_DECAY * self.seconds_spent[i] + seconds
        self._per_unit = None

    def seconds_per_unit(self) -> np.ndarray | None:
        """Per bucket; None until a batch was measured."""
        if self._per_unit is None:
            measured = np.flatnonzero(self.units > 0)
            if measured.size == 0:
                return None
            pace = self.seconds_spent[measured] / self.units[measured]
            longer = np.searchsorted(measured, np.arange(self.size))  # the nearest measured bucket at or above each
            self._per_unit = pace[np.minimum(longer, measured.size - 1)]
        return self._per_unit

    @staticmethod
    def seconds(work: np.ndarray, per_unit: np.ndarray) -> float:
        return float(work @ per_unit)

    def share(self, *works: np.ndarray) -> float:
        """The share of the deadline admission may fill with `works`: DEADLINE_SHARE once every length they hold has
        been timed on served batches, WARMUP_PACE_SHARE while one is timed by the warm-up alone."""
        timed_by_warmup = any(((w > 0) & ~self.served).any() for w in works)
        return WARMUP_PACE_SHARE if timed_by_warmup else DEADLINE_SHARE


class Backlog:
    """The work admitted to one model and not yet done: each request holds its own (units per bucket, `Pace.work`),
    this holds their sum, kept as requests arrive, are tokenised, run and leave, so that admission needs the
    requests one by one only when the sum alone says the deadline may be near."""

    def __init__(self, size: int):
        self.total = np.zeros(size)

    def enter(self, work: np.ndarray) -> None:
        self.total += work

    def replace(self, old: np.ndarray, new: np.ndarray) -> None:
        """A request's estimate `old` became `new` (it was tokenised)."""
        self.total += new - old

    def ran(self, work: np.ndarray, bucket: int, units: float) -> None:
        """`units` of one request's `work` at `bucket` ran: both go down (never below 0)."""
        done = min(work[bucket], units)
        work[bucket] -= done
        self.total[bucket] = max(0.0, self.total[bucket] - done)

    def leave(self, work: np.ndarray) -> None:
        np.maximum(self.total - work, 0.0, out=self.total)


class Estimator:
    """A request's input lengths before it is tokenised: characters / (the slot's running characters per token),
    + 2 for [CLS] and [SEP], at most the served length, per input."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.chars_per_token = CHARS_PER_TOKEN

    def lengths(self, char_counts: Iterable[int]) -> list[int]:
        return [min(self.max_tokens, math.ceil(n / self.chars_per_token) + 2) for n in char_counts]

    def observe(self, chars: int, tokens: int) -> None:
        """A tokenisation round of `chars` characters gave `tokens` tokens (special tokens left out)."""
        if chars > 0 and tokens > 0:
            self.chars_per_token = 0.8 * self.chars_per_token + 0.2 * max(1.0, chars / tokens)


def input_chars(x: str | tuple[str, str]) -> int:
    """Characters of one input: a text, or both sides of a pair."""
    return len(x) if isinstance(x, str) else len(x[0]) + len(x[1])


def _refuse_past(seconds: float, deadline_s: float, why: str, hint: str = "", share: float = DEADLINE_SHARE) -> None:
    """Overloaded (with Retry-After) when `seconds` of model time is past `share` of `deadline_s`; `why` may name
    {seconds}."""
    budget = share * deadline_s
    if seconds > budget:
        wait = max(MIN_RETRY_S, seconds - budget)  # by then that much of the work ahead should have run
        raise Overloaded(f"the model is busy: {why.format(seconds=seconds)}, past the deadline of {deadline_s:g} s "
                         f"(request_timeout_s); retry in ~{math.ceil(wait)} s{hint}", retry_after_s=wait)


def check_deadline(work: np.ndarray, backlog: Backlog, others: Iterable[tuple[np.ndarray, float]], pace: Pace,
                   deadline_s: float, waited: float = 0.0) -> None:
    """Overloaded when a request of `work` (units per bucket), sharing the model round robin with the admitted
    requests (`backlog`: their sum; `others`: each one's work left and the seconds it has waited so far; `waited`:
    the longest of those), is predicted to finish after its deadline, or to push an admitted request that would have
    finished in time past its own (each admitted request shares the model with it too). The transports answer 429
    with Retry-After, or RESOURCE_EXHAUSTED. The requests are looked at one by one only when the work admitted and
    this request's together would take the oldest admitted request past its deadline."""
    per_unit = pace.seconds_per_unit()
    if per_unit is None:
        return
    ahead_total = float(backlog.total @ per_unit)
    if ahead_total <= 0:
        return
    mine = float(work @ per_unit)
    share = pace.share(work, backlog.total)
    budget = share * deadline_s
    if mine + ahead_total <= budget - waited:
        return
    pairs = [(pace.seconds(w, per_unit), e) for w, e in others]
    left = np.array([t for t, _ in pairs], dtype=float)  # (n,) seconds of work left, each admitted request
    age = np.array([e for _, e in pairs], dtype=float)  # (n,) seconds each has waited
    busy = left > 0
    left, age = left[busy], age[busy]
    finish = mine + float(np.minimum(left, mine).sum())
    _refuse_past(finish, deadline_s, f"behind {left.size} others this request would finish in ~{{seconds:.0f}} s",
                 ", or send fewer or shorter inputs", share)
    # round robin: request j finishes after sum_k min(t_k, t_j) of the admitted, and min(mine, t_j) more with this one
    order = np.argsort(left)
    t = left[order]
    before = np.cumsum(t) - t + t * (t.size - np.arange(t.size))  # sum_k min(t_k, t_j), j in ascending order
    due = age[order] + before
    after = due + np.minimum(t, mine)
    # the admitted requests' own deadline (the full share: the warm-up's caution was for admitting them)
    theirs = DEADLINE_SHARE * deadline_s
    pushed = (due <= theirs) & (after > theirs)
    if pushed.any():
        late = float(after[pushed].max())
        _refuse_past(late, deadline_s, "it would push a request admitted before it past its deadline (~{seconds:.0f} s "
                     "of its own)", ", or send fewer or shorter inputs")


BIG_BODY_BYTES = 64 << 10  # a body this large carries tens of thousands of characters: likely big work


class Admission:
    """One model's admission: its pace, the work admitted and not yet done (the backlog, and each request's own),
    and the estimate of a request's lengths before it is tokenised. The batcher tells it what happens to a request,
    by these events alone, and nothing else changes its numbers:

        admit(request, inputs)          arrived: estimated from its characters, refused (Overloaded) or counted
        tokenised(request, lengths)     its inputs' exact lengths replace the estimate
        learn(chars, tokens)            a tokenisation round's characters per token, for the next estimates
        ran(runs, padded, seconds)      a batch ran: the pace at its length, and each input's work done
        left(request)                   answered, failed or cancelled: what is left of its work goes

and it is asked `first_done_s()`, when a place among the admitted requests should free (the engine's Retry-After
for a request over max_concurrent_requests).
    """

    def __init__(self, hidden_size: int, max_tokens: int, deadline_s: float):
        self.deadline_s = deadline_s
        self.pace = Pace(hidden_size, max_tokens)
        self.estimator = Estimator(max_tokens)
        self.backlog = Backlog(self.pace.size)
        self._admitted: dict[object, tuple[np.ndarray, float]] = {}  # request -> (its work left, when admitted)
        self._first_done: float | None = None  # first_done_s, until the next event

    def admit(self, request: object, inputs: Sequence[str | tuple[str, str]], *, check: bool = True) -> None:
        """Count `request` in, its work estimated from its inputs' characters; with `check`, refuse it first
        (Overloaded) when it would finish after its deadline (check_deadline)."""
        work = self.pace.work(self.estimator.lengths(map(input_chars, inputs)))
        now = time.perf_counter()
        if check:
            oldest = next(iter(self._admitted.values()), None)  # the requests one by one only when needed: lazily
            check_deadline(work, self.backlog, ((w, now - t) for w, t in self._admitted.values()), self.pace,
                           self.deadline_s, now - oldest[1] if oldest is not None else 0.0)
        self._admitted[request] = (work, now)
        self.backlog.enter(work)
        self._first_done = None

    def tokenised(self, request: object, lengths: Iterable[int]) -> None:
        work, since = self._admitted[request]
        exact = self.pace.work(lengths)
        self.backlog.replace(work, exact)
        self._admitted[request] = (exact, since)
        self._first_done = None

    def learn(self, chars: int, tokens: int) -> None:
        """A tokenisation round of `chars` characters gave `tokens` tokens (special tokens and truncated inputs left
        out)."""
        self.estimator.observe(chars, tokens)

    def ran(self, runs: Iterable[tuple[object, int]], padded_length: int, seconds: float, served: bool) -> None:
        """A batch of inputs (each its request and its length in tokens: `runs`), padded to `padded_length`, ran in
        `seconds` (`served`: not only the warm-up's)."""
        runs = list(runs)
        self.pace.add([n for _, n in runs], padded_length, seconds, served)
        for request, n in runs:
            if request in self._admitted:
                self.backlog.ran(self._admitted[request][0], self.pace.index(n), cost(n, self.pace.hidden_size))
        self._first_done = None

    def left(self, request: object) -> None:
        work, _ = self._admitted.pop(request)
        self.backlog.leave(work)
        self._first_done = None

    def first_done_s(self) -> float | None:
        """Seconds until the first admitted request should be done, sharing the model round robin: the n admitted
        requests' least work left, n times (its share is 1/n until it is done); None when none is admitted or the
        pace was never measured. What a request refused over max_concurrent_requests should wait: a place frees
        then. Kept until the next event changes the numbers, so a burst of refusals costs one look."""
        if self._first_done is None and self._admitted:
            per_unit = self.pace.seconds_per_unit()
            if per_unit is not None:
                least = min(self.pace.seconds(w, per_unit) for w, _ in self._admitted.values())
                self._first_done = len(self._admitted) * least
        return self._first_done

    def refuse_big_body(self) -> Overloaded | None:
        """Overloaded when the work admitted alone is past the deadline (check_backlog), else None."""
        try:
            check_backlog(self.backlog, self.pace, self.deadline_s)
        except Overloaded as e:
            return e
        return None


def check_backlog(backlog: Backlog, pace: Pace, deadline_s: float) -> None:
    """Overloaded when the work already admitted (`backlog`) alone takes the model past `deadline_s`: then a big
    request would not finish in time whatever it holds, and is refused before its body is read."""
    per_unit = pace.seconds_per_unit()
    if per_unit is not None:
        _refuse_past(float(backlog.total @ per_unit), deadline_s,
                     "~{seconds:.0f} s of admitted work is ahead of a large request")
