"""Admission by work (server/admission.py): what a request costs, when it is refused, and what a client is told."""

import pytest

from server.admission import Estimator, WorkRate, check_deadline, cost
from server.errors import Overloaded


def rate(units_per_second: float) -> WorkRate:
    r = WorkRate()
    r.add(units_per_second, 1.0)
    return r


def test_an_input_costs_its_tokens_and_attention_grows_with_their_square():
    assert cost(16, 128) == pytest.approx(16 * (1 + 16 / 768))
    assert 45 < cost(512, 128) / cost(16, 128) < 60  # not 32 (tokens) nor 1,024 (tokens x positions)
    assert cost(512, 384) / cost(512, 128) < 1  # a wider model's attention weighs less against its dense layers


def test_the_rate_follows_recent_batches_weighted_by_their_time():
    r = WorkRate()
    assert r.per_second is None
    r.add(1000, 1.0)
    assert r.per_second == pytest.approx(1000)
    for _ in range(30):  # the model slowed down (a longer bucket, a busy machine): the rate follows
        r.add(100, 1.0)
    assert r.per_second == pytest.approx(100, rel=0.01)


def test_the_estimate_counts_characters_caps_at_the_served_length_and_learns_the_tokenizer():
    e = Estimator(hidden_size=128, max_tokens=512)
    assert e.estimate([40]) == pytest.approx(cost(12, 128))  # 40 chars / 4 + [CLS] [SEP]
    assert e.estimate([4000]) == pytest.approx(cost(512, 128))  # truncated to the served length
    for _ in range(40):
        e.observe(chars=200, tokens=100)  # a tokenizer that gives a token every two characters
    assert e.chars_per_token == pytest.approx(2.0, rel=0.01)
    assert e.estimate([40]) == pytest.approx(cost(22, 128), rel=0.01)
    e.observe(chars=0, tokens=0)  # an empty round changes nothing
    assert e.chars_per_token == pytest.approx(2.0, rel=0.01)


def test_never_refused_before_a_rate_is_known_or_when_the_model_has_nothing_else_to_do():
    check_deadline(1e12, [1e12], WorkRate(), 30.0)
    check_deadline(1e12, [], rate(1.0), 30.0)
    check_deadline(1e12, [0.0, 0.0], rate(1.0), 30.0)  # requests whose work is all done


def test_a_big_request_behind_big_ones_is_refused_with_when_to_retry():
    with pytest.raises(Overloaded) as e:
        check_deadline(10_000, [10_000] * 5, rate(1_000), deadline_s=30.0)  # (10k + 50k) / 1k = 60 s > 24 s
    assert e.value.retry_after == 36 and e.value.headers() == {"retry-after": "36"}
    assert "60 s" in e.value.message and "30 s" in e.value.message and "5 others" in e.value.message


def test_a_small_request_is_admitted_beside_the_same_big_ones():
    # round robin: it waits for its share of each big request, its own size, not for all of them
    check_deadline(50, [10_000] * 5, rate(1_000), deadline_s=30.0)  # (50 + 5 * 50) / 1k = 0.3 s


def test_overloaded_without_a_retry_time_sends_no_header():
    assert Overloaded("4 requests in flight").headers() == {}


def test_a_backlog_past_the_deadline_refuses_big_bodies_before_they_are_read():
    from server.admission import check_backlog

    check_backlog([], rate(1_000), 30.0)
    check_backlog([10_000, 10_000], WorkRate(), 30.0)  # no rate yet
    check_backlog([10_000, 10_000], rate(1_000), 30.0)  # 20 s of work: within 24 s
    with pytest.raises(Overloaded) as e:
        check_backlog([10_000, 10_000, 10_000], rate(1_000), 30.0)  # 30 s
    assert e.value.retry_after == 6 and "30 s of admitted work" in e.value.message
