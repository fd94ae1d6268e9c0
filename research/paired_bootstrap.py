"""The paired bootstrap the studies compare two scorers with (BLiMP pairs, one run against another): used by
research/equal_compute, research/stabiliser_ladder and research/electric_plus_cloze. No product code uses it; the
reranking guard has its own bootstrap over utterances (docs/scoring.md)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def paired_bootstrap_mean_diff(a: Sequence[float], b: Sequence[float], *, resamples: int = 10_000, seed: int = 0,
                               confidence: float = 0.95) -> dict:
    """mean(a) - mean(b) of paired per-item values (e.g. 1/0 correctness of two scorers on the same BLiMP pairs)
    with its percentile confidence interval over `resamples` seeded resamplings of the items with replacement
    (paired: both are read on the same resample). `significant`: the whole interval lies above 0."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"a and b differ in shape: {x.shape} vs {y.shape}")
    if x.size == 0:
        raise ValueError("no items to resample")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    d = x - y  # (N,)
    rng = np.random.default_rng(seed)
    block = max(1, 4_000_000 // d.size)  # resamples per (block, N) index matrix: bounded memory
    means = np.concatenate([d[rng.integers(0, d.size, size=(min(block, resamples - done), d.size))].mean(1)
                            for done in range(0, resamples, block)])  # (resamples,)
    lo, hi = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2]) + 0.0  # + 0.0: no -0.0
    return {"diff": float(d.mean()) + 0.0, "ci": [float(lo), float(hi)], "confidence": confidence,
            "resamples": resamples, "seed": seed, "items": int(d.size), "significant": bool(lo > 0)}
