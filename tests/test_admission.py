"""Admission by work (server/admission.py): what a request costs, how long the model takes at each length, when a
request is refused, and what a client is told."""

import numpy as np
import pytest

from server.admission import Admission, Backlog, Estimator, Pace, check_backlog, check_deadline, cost
from server.errors import RETRY_S, Overloaded

H = 128  # hidden size of the paces below


def pace(units_per_second: float, length: int = 16, max_tokens: int = 512) -> Pace:
    """A pace measured once: `units_per_second` at inputs of `length` tokens."""
    p = Pace(H, max_tokens)
    p.add([length], length, cost(length, H) / units_per_second)
    return p


def backlog(works) -> Backlog:
    b = Backlog(Pace(H, 512).size)
    for w in works:
        b.enter(w)
    return b


def deadline(mine, others, p, deadline_s=30.0):
    """check_deadline of `mine` behind `others` (each request's work), their backlog kept as the batcher keeps it."""
    check_deadline(mine, backlog(others), [(w, 0.0) for w in others], p, deadline_s)


def work(units: float, length: int = 16, max_tokens: int = 512) -> np.ndarray:
    """`units` of work at the bucket of `length`."""
    p = Pace(H, max_tokens)
    w = np.zeros(p.size)
    w[p.index(length)] = units
    return w


def test_an_input_costs_its_tokens_and_attention_grows_with_their_square():
    assert cost(16, 128) == pytest.approx(16 * (1 + 16 / 768))
    assert 45 < cost(512, 128) / cost(16, 128) < 60  # not 32 (tokens) nor 1,024 (tokens x positions)
    assert cost(512, 384) / cost(512, 128) < 1  # a wider model's attention weighs less against its dense layers


def test_work_is_counted_per_length_bucket():
    p = Pace(H, max_tokens=512)
    assert p.lengths() == [16, 32, 64, 128, 256, 512]
    w = p.work([3, 16, 17, 512, 600])  # 600: above the served length, counted in the last bucket
    assert w.tolist() == pytest.approx([cost(3, H) + cost(16, H), cost(17, H), 0, 0, 0, cost(512, H) + cost(600, H)])


def test_each_length_keeps_its_own_pace_following_its_recent_batches():
    p = Pace(H, max_tokens=512)
    assert p.seconds_per_unit() is None
    p.add([20, 30], 32, seconds=0.01)
    p.add([500] * 4, 512, seconds=2.0)
    per_unit = p.seconds_per_unit()
    assert per_unit[p.index(32)] == pytest.approx(0.01 / (cost(20, H) + cost(30, H)))
    assert per_unit[p.index(512)] == pytest.approx(2.0 / (4 * cost(500, H)))
    # never measured: the nearest longer bucket measured (16 -> 32, 64..256 -> 512)
    assert per_unit[p.index(16)] == per_unit[p.index(32)]
    assert per_unit[p.index(100)] == per_unit[p.index(512)]
    for _ in range(30):  # the model slowed down at 512 (a busy machine): that bucket follows, the others stay
        p.add([500] * 4, 512, seconds=20.0)
    assert p.seconds_per_unit()[p.index(512)] == pytest.approx(20.0 / (4 * cost(500, H)), rel=0.01)
    assert p.seconds_per_unit()[p.index(32)] == per_unit[p.index(32)]
    only_short = Pace(H, max_tokens=512)
    only_short.add([10], 16, seconds=0.001)
    assert only_short.seconds_per_unit()[only_short.index(512)] == pytest.approx(0.001 / cost(10, H))


def test_a_long_request_is_judged_by_the_pace_at_its_length_not_at_short_ones():
    p = Pace(H, max_tokens=512)
    p.add([16] * 64, 16, seconds=64 * cost(16, H) / 100_000)  # short inputs: 100k units a second
    p.add([512] * 4, 512, seconds=4 * cost(512, H) / 10_000)  # 512 tokens: ten times slower a unit
    big = p.work([512] * 256)  # ~22 s at 10k units a second, 2.2 s at the short inputs' pace
    deadline(big, [p.work([16])], p)
    with pytest.raises(Overloaded):  # 22 s + 22 s behind another one like it, past 24 s
        deadline(big, [big.copy()], p)


def test_a_pace_timed_by_the_warm_up_alone_fills_less_of_the_deadline():
    p = Pace(H, max_tokens=512)
    p.add([512] * 4, 512, seconds=4 * cost(512, H) / 1_000, served=False)  # the warm-up: 1k units a second
    big = work(10_000, length=512)  # 10 s at that pace
    deadline(big, [], p)  # alone: never refused
    with pytest.raises(Overloaded):  # 20 s behind one like it: past 0.4 x 30 s while only the warm-up timed it
        deadline(big, [big.copy()], p)
    p.add([512] * 16, 512, seconds=16 * cost(512, H) / 1_000)  # a batch of requests ran at 512 tokens
    deadline(big, [big.copy()], p)  # 20 s: within 0.8 x 30 s


def test_the_estimate_counts_characters_caps_at_the_served_length_and_learns_the_tokenizer():
    e = Estimator(max_tokens=512)
    assert e.lengths([40, 4000]) == [12, 512]  # 40 chars / 4 + [CLS] [SEP]; truncated to the served length
    for _ in range(40):
        e.observe(chars=200, tokens=100)  # a tokenizer that gives a token every two characters
    assert e.chars_per_token == pytest.approx(2.0, rel=0.01)
    assert e.lengths([40]) == [22]
    e.observe(chars=0, tokens=0)  # an empty round changes nothing
    assert e.chars_per_token == pytest.approx(2.0, rel=0.01)


def test_never_refused_before_a_pace_is_known_or_when_the_model_has_nothing_else_to_do():
    deadline(work(1e12), [work(1e12)], Pace(H, 512))
    deadline(work(1e12), [], pace(1.0))
    deadline(work(1e12), [work(0.0), work(0.0)], pace(1.0))  # requests whose work is all done


def test_a_big_request_behind_big_ones_is_refused_with_when_to_retry():
    with pytest.raises(Overloaded) as e:
        deadline(work(10_000), [work(10_000)] * 5, pace(1_000))  # 10 + 50 s > 24 s
    assert e.value.retry_after_s == pytest.approx(36.0)  # 60 s of it, less the 24 s it may take
    assert "60 s" in e.value.message and "30 s" in e.value.message and "5 others" in e.value.message


def test_a_small_request_is_admitted_beside_the_same_big_ones():
    # round robin: it waits for its share of each big request, its own size, not for all of them
    deadline(work(50), [work(10_000)] * 5, pace(1_000))  # (50 + 5 * 50) / 1k = 0.3 s


def test_the_backlog_follows_its_requests_from_arrival_to_leaving():
    p = Pace(H, 512)
    b = Backlog(p.size)
    estimate, exact = p.work([512, 512]), p.work([300, 20])
    b.enter(estimate)
    b.replace(estimate, exact)
    np.testing.assert_allclose(b.total, exact)
    b.ran(exact, p.index(20), cost(20, H))
    assert exact[p.index(20)] == 0 and b.total[p.index(20)] == 0
    b.ran(exact, p.index(300), 1e9)  # more than is left: both stop at 0
    assert exact.sum() == 0 and b.total.sum() == 0
    other = p.work([64])
    b.enter(other)
    b.leave(other)
    assert b.total.sum() == 0


def test_a_request_that_would_push_an_admitted_one_past_its_deadline_is_refused():
    p = pace(1_000)  # seconds = units / 1000
    old = work(2_000)  # 2 s left of a request that has waited 21 s: due at 21 + 2 = 23 s, within 24 s
    new = work(5_000)  # 5 s: alone behind it, due at 5 + 2 = 7 s, well in time itself
    with pytest.raises(Overloaded) as e:  # but round robin it would delay the old one by 2 s, to 25 s
        check_deadline(new, backlog([old]), [(old, 21.0)], p, 30.0, waited=21.0)
    assert "past its deadline" in e.value.message
    check_deadline(new, backlog([old]), [(old, 10.0)], p, 30.0, waited=10.0)  # had it waited 10 s: due at 14 s
    doomed = [(old, 29.0)]  # already past its deadline: this request is not what makes it late
    check_deadline(new, backlog([old]), doomed, p, 30.0, waited=29.0)


def test_a_refusal_over_the_request_limit_waits_for_the_first_admitted_request_to_be_done():
    a = Admission(H, 512, 30.0)
    assert a.first_done_s() is None  # nothing admitted
    a.admit("one", ["x" * 56])  # 56 characters: 16 tokens, [CLS] and [SEP] included
    assert a.first_done_s() is None  # no pace yet
    a.pace.add([16], 16, cost(16, H) / 1_000)  # 1,000 units a second
    a.admit("ten", ["x" * 56] * 10)
    one = cost(16, H) / 1_000  # seconds
    assert a.first_done_s() == pytest.approx(2 * one)  # round robin: "one" has half the model until it is done
    a.left("one")
    assert a.first_done_s() == pytest.approx(10 * one)
    assert Overloaded("4 requests in flight").retry_after_s == RETRY_S  # no estimate: the default


def test_a_backlog_past_the_deadline_refuses_big_bodies_before_they_are_read():
    check_backlog(backlog([]), pace(1_000), 30.0)
    check_backlog(backlog([work(10_000), work(10_000)]), Pace(H, 512), 30.0)  # no pace yet
    check_backlog(backlog([work(10_000), work(10_000)]), pace(1_000), 30.0)  # 20 s of work: within 24 s
    with pytest.raises(Overloaded) as e:
        check_backlog(backlog([work(10_000)] * 3), pace(1_000), 30.0)  # 30 s
    assert e.value.retry_after_s == pytest.approx(6.0) and "30 s of admitted work" in e.value.message


def test_the_warm_up_measures_the_pace_at_every_length_the_model_serves(disc_dir):
    import asyncio

    from server.engine import Engine
    from server.settings import Settings

    async def warmed_pace():
        engine = Engine(Settings(model=disc_dir, grpc_port=-1, threads=1, access_log=False))
        await engine.start()
        try:
            slot = next(iter(engine.models.values()))
            return slot.model.max_tokens, slot.admission.pace
        finally:
            await engine.close(10)

    max_tokens, p = asyncio.run(warmed_pace())
    assert max_tokens == 128
    measured = [n for n in p.lengths() if p.units[p.index(n)] > 0]
    assert measured == [16, 32, 64, 128]
    per_unit = p.seconds_per_unit()
    assert (per_unit > 0).all()
