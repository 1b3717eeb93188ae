"""An independent, direct computation of the privacy curve of a composed Poisson-subsampled
Gaussian mechanism (add/remove neighbours), used only to check the tight accountant.

For sensitivity 1 and noise std sigma, the two worst-case pairs are
  remove: P = (1 - q) N(0, s^2) + q N(1, s^2) against Q = N(0, s^2)
  add:    Q against P,
with privacy loss L(x) = log((1 - q) + q exp((2x - 1) / (2 s^2))) (or its negative). The
loss of one step is discretised on a fine x-grid, rounded to the nearest point of a loss grid
of width h (an estimate, not a bound: rounding up would add steps * h / 2 on average), the
T-fold composition is an FFT power, and delta(eps) = E[(1 - e^(eps - L))_+].
"""

from __future__ import annotations

import numpy as np
from scipy import stats


def _loss_pmf(q: float, s: float, add: bool, h: float) -> tuple[np.ndarray, float, float]:
    """(pmf on the loss grid, grid origin, mass dropped in the tails) for one step."""
    edges = np.linspace(-10 * s - 1, 10 * s + 2, 200_001)
    mid = (edges[:-1] + edges[1:]) / 2
    null = np.diff(stats.norm.cdf(edges, 0, s))
    alt = np.diff(stats.norm.cdf(edges, 1, s))
    loss = np.log1p(q * np.expm1((2 * mid - 1) / (2 * s**2)))
    if add:
        loss, mass = -loss, null
    else:
        mass = (1 - q) * null + q * alt
    dropped = 1.0 - mass.sum()
    origin = np.floor(loss.min() / h) * h
    index = np.rint((loss - origin) / h).astype(int)
    pmf = np.bincount(index, weights=mass)
    return pmf, origin, dropped


class DeltaCurve:
    """delta(eps) = E[(1 - e^(eps - L))_+] of one composed pmf (plus the mass dropped in its
    tails) at any eps >= 0, each in O(log size) after one pass.

    Over the losses above eps, E[(1 - e^(eps - L))_+] = sum p - e^eps * sum p e^-L: both sums
    are suffix sums over the grid, kept for the positive losses (eps >= 0 needs no others;
    there e^-L <= 1, so nothing overflows). A bisection then costs one pass over the grid,
    not one per step (the composed grids hold millions of points, and a bisection asks 61
    times)."""

    def __init__(self, pmf: np.ndarray, origin: float, h: float, dropped: float) -> None:
        losses = origin + h * np.arange(pmf.size)
        positive = losses > 0
        self.losses = losses[positive]
        # suffix sums: entry i sums the grid points i, i + 1, ... (one more entry, 0, at the end)
        self.mass = np.append(np.cumsum(pmf[positive][::-1])[::-1], 0.0)
        self.weighted = np.append(
            np.cumsum((pmf[positive] * np.exp(-self.losses))[::-1])[::-1], 0.0
        )
        self.dropped = dropped

    def __call__(self, eps: float) -> float:
        first = int(np.searchsorted(self.losses, eps, side="right"))  # losses > eps from here
        return float(self.mass[first] - np.exp(eps) * self.weighted[first]) + self.dropped

    def epsilon(self, delta: float) -> float:
        """The least eps in [0, 100] (to 60 halvings) with delta(eps) <= ``delta``."""
        lo, hi = 0.0, 100.0
        if self(lo) <= delta:
            return 0.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if self(mid) > delta:
                lo = mid
            else:
                hi = mid
        return hi


def epsilon(q: float, sigma: float, steps: int, delta: float, h: float = 5e-4) -> float:
    """Epsilon at ``delta`` of ``steps`` compositions (both directions, the worse one)."""
    worst = 0.0
    for add in (False, True):
        pmf, origin, dropped = _loss_pmf(q, sigma, add, h)
        size = 1 << int(np.ceil(np.log2(steps * (pmf.size - 1) + 1)))
        composed = np.fft.irfft(np.fft.rfft(pmf, size) ** steps, size)
        composed = np.clip(composed[: steps * (pmf.size - 1) + 1], 0, None)
        dropped_total = 1 - (1 - dropped) ** steps
        curve = DeltaCurve(composed, steps * origin, h, dropped_total)
        worst = max(worst, curve.epsilon(delta))
    return worst
