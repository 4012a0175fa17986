"""Confidence intervals: Wilson for success rates, order statistics for medians, the bootstrap for means."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from statistics import fmean

Z95 = 1.959963984540054


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a binomial rate (sound at 0/n and n/n, unlike the normal one)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def median(values: Sequence[float]) -> float | None:
    """The sample median; None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    mid = len(xs) // 2
    return float(xs[mid]) if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free interval for the median: order statistics x(j) .. x(n+1-j).

    j is the largest rank with P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2, so the interval
    covers the true median with at least `confidence`; with too few values it is the full range.
    """
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return None
    alpha = (1 - confidence) / 2
    j = 0
    while j + 1 <= n // 2 and _binom_cdf(j, n) <= alpha:
        j += 1
    # j is now the number of order statistics cut from each end (at least 0).
    lo = xs[j - 1] if j >= 1 else xs[0]
    hi = xs[n - j] if j >= 1 else xs[-1]
    return (float(lo), float(hi))


#: Bootstrap resamples and seed: fixed, so the same results always print the same interval.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """A bootstrap percentile interval for the mean (2,000 resamples, seed 0); None for no values.

    Chosen over a t-interval because per-question scores such as HotpotQA's F1 pile up at 0 and 1,
    far from normal; the percentile interval also stays inside [min, max] of the values.
    """
    xs = list(values)
    if not xs:
        return None
    rng = random.Random(BOOTSTRAP_SEED)
    means = sorted(fmean(rng.choices(xs, k=len(xs))) for _ in range(BOOTSTRAP_RESAMPLES))
    alpha = (1 - confidence) / 2
    lo = means[int(math.floor(alpha * (BOOTSTRAP_RESAMPLES - 1)))]
    hi = means[int(math.ceil((1 - alpha) * (BOOTSTRAP_RESAMPLES - 1)))]
    return (lo, hi)
