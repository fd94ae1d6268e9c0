"""electric.evaluation.blimp.paired_bootstrap_mean_diff, the paired bootstrap of a mean difference that the studies
and the GPU report compare two scorers with, on hand-made inputs."""

from __future__ import annotations

import pytest

from electric.evaluation.blimp import paired_bootstrap_mean_diff


def test_paired_bootstrap_mean_diff_by_hand():
    better = paired_bootstrap_mean_diff([1] * 50, [0] * 50, resamples=200)
    assert better["diff"] == 1.0 and better["ci"] == [1.0, 1.0] and better["significant"]
    same = paired_bootstrap_mean_diff([1, 0, 1, 0], [1, 0, 1, 0], resamples=200)
    assert same["diff"] == 0.0 and same["ci"] == [0.0, 0.0] and not same["significant"]
    # one pair of 4 differs in a's favour: diff 1/4; every resample's mean lies in {0, 1/4, ..., 1}
    r = paired_bootstrap_mean_diff([1, 1, 0, 0], [0, 1, 0, 0], resamples=2000, seed=3)
    assert r["diff"] == 0.25 and r["ci"][0] == 0.0 and 0.5 <= r["ci"][1] <= 0.75 and not r["significant"]
    assert r == paired_bootstrap_mean_diff([1, 1, 0, 0], [0, 1, 0, 0], resamples=2000, seed=3)  # seeded
    assert r["items"] == 4 and r["resamples"] == 2000


def test_paired_bootstrap_mean_diff_rejects_bad_input():
    with pytest.raises(ValueError, match="shape"):
        paired_bootstrap_mean_diff([1, 0], [1])
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap_mean_diff([1], [0], confidence=1.0)
