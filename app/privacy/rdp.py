"""Rényi DP of the Gaussian mechanism, subsampled or not (pure math).

Used by the paper-compatible accountant and by the ledger's Rényi filter
(:mod:`app.privacy.filter`). Everything is for the Gaussian mechanism with noise multiplier
sigma (noise std over the L2 sensitivity under the relation in use), at integer orders.

* Poisson subsampling, add/remove neighbours: Mironov, Talwar and Zhang (2019), Section 3.3,
  exact at integer orders a:

      A(a) = sum_{k=0..a} C(a,k) (1-q)^(a-k) q^k e^{(k^2 - k) / (2 sigma^2)}
      eps'(a) = log A(a) / (a - 1)

  the Rényi divergence of the mixture (1-q) N(0, sigma^2) + q N(1, sigma^2) from N(0,
  sigma^2); their Theorem 5 shows the other direction never exceeds it, so it bounds both.

* Amplification: Wang, Balle and Kasiviswanathan (AISTATS 2019), the bound for the
  subsampled Gaussian mechanism (their Theorem 27, as also implemented by dp-accounting):

      A(a) = 1 + g^2 C(a,2) min(4 D_2, 2 e^{eps(2)})
               + sum_{j=3..a} g^j C(a,j) min(4 sqrt(D_{2 floor(j/2)} D_{2 ceil(j/2)}),
                                             2 e^{(j-1) eps(j)})
      eps'(a) = log A(a) / (a - 1)

  with g = m/n the sampling fraction, eps(a) = a / (2 sigma^2) the Gaussian's RDP and
  D_k = E[(Y - 1)^k] the k-th central moment of Y = e^X - 1 + 1, X ~ N(-c, 2c),
  c = 1/(2 sigma^2): Y is the likelihood ratio N(1, sigma^2) / N(0, sigma^2) under the
  second, so D_k is the Pearson-Vajda chi^k divergence that the bound needs.
* Conversion to (epsilon, delta): Balle et al. (AISTATS 2020), Theorem 21:
  eps = rho + log((a - 1)/a) - (log delta + log a)/(a - 1).

D_k is computed by quadrature in log space, not as the alternating binomial sum
sum_i (-1)^(k-i) C(k,i) e^{c i (i-1)}, whose cancellation loses hundreds of digits for large
sigma and k. On each half-line the integrand |e^x - 1|^k phi(x) is log-concave, so a grid
around its single mode captures it to near machine precision.
"""

from __future__ import annotations

import functools
import math

import numpy as np

# SciPy's special functions are imported where they are used, not here: SciPy costs every
# process that imports the privacy code (each ``dpsyn`` command, the API, the worker) a
# fraction of a second of CPU at start, most of which never price an event.

ORDERS = np.arange(2, 257)
_GRID = np.linspace(-40.0, 40.0, 4001)


def gaussian_rdp(sigma: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """RDP of the Gaussian mechanism: a / (2 sigma^2) (infinite without noise)."""
    if sigma == 0:
        return np.full(orders.shape, np.inf)
    return orders / (2.0 * sigma**2)


def laplace_rdp(scale: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """RDP of the Laplace mechanism with ``scale`` (Laplace parameter over the L1
    sensitivity), exact (Mironov 2017, Proposition 6): for a > 1,

        eps(a) = log( a/(2a-1) e^{(a-1)/b} + (a-1)/(2a-1) e^{-a/b} ) / (a - 1),

    summed in log space (the first term overflows for small b). Infinite without noise."""
    if scale == 0:
        return np.full(orders.shape, np.inf)
    a = np.asarray(orders, dtype=float)
    first = np.log(a / (2 * a - 1)) + (a - 1) / scale
    second = np.log((a - 1) / (2 * a - 1)) - a / scale
    return np.logaddexp(first, second) / (a - 1)


def randomized_response_rdp(
    noise_parameter: float, num_buckets: int, orders: np.ndarray = ORDERS
) -> np.ndarray:
    """RDP of k-ary randomized response between two distinct input buckets, exact: with
    a = 1 - p + p/k (the true bucket's probability) and b = p/k (any other's), for order
    alpha > 1 the Renyi divergence of P = (a, b, b, ...) from Q = (b, a, b, ...) is

        eps(alpha) = log( a^alpha b^(1-alpha) + b^alpha a^(1-alpha) + (k-2) b ) / (alpha-1),

    summed in log space. 0 when the output ignores the input (k = 1 or p = 1), infinite
    when it is the input (p = 0)."""
    p, k = noise_parameter, num_buckets
    alpha = np.asarray(orders, dtype=float)
    if k == 1 or p == 1:
        return np.zeros(alpha.shape)
    if p == 0:
        return np.full(alpha.shape, np.inf)
    log_a, log_b = math.log(1 - p + p / k), math.log(p / k)
    total = np.logaddexp(alpha * log_a + (1 - alpha) * log_b, alpha * log_b + (1 - alpha) * log_a)
    if k > 2:
        total = np.logaddexp(total, math.log((k - 2) * p / k))
    return total / (alpha - 1)


def pure_dp_rdp(epsilon: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """RDP of any epsilon-DP mechanism at its worst case, exact: binary randomized response
    at epsilon (every epsilon-DP mechanism is a post-processing of it: Kairouz, Oh and
    Viswanath 2015), whose noise parameter p = 2 / (e^epsilon + 1)."""
    return randomized_response_rdp(2.0 / (math.exp(epsilon) + 1.0), 2, orders)


def _log_abs_expm1(x: np.ndarray) -> np.ndarray:
    """log|e^x - 1| without overflow for large positive x."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(x > 0, x + np.log(-np.expm1(-x)), np.log(-np.expm1(x)))


def _dlog_abs_expm1(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and second derivative of log|e^x - 1| (e^x/(e^x-1) and -e^x/(e^x-1)^2)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        first = np.where(x > 0, -1.0 / np.expm1(-x), np.exp(x) / np.expm1(x))
        second = np.where(x > 0, -np.exp(-x) / np.expm1(-x) ** 2, -np.exp(x) / np.expm1(x) ** 2)
    return first, second


def _half_line_log_integral(ks: np.ndarray, c: float, positive: bool) -> np.ndarray:
    """log of the integral over x > 0 (or x < 0) of |e^x - 1|^k N(x; -c, 2c), per k."""
    from scipy.special import logsumexp

    var = 2.0 * c
    sign = 1.0 if positive else -1.0

    def slope(x: np.ndarray) -> np.ndarray:
        # d/dx [k log|e^x - 1| + log phi(x)]; decreasing on each half-line (log-concavity)
        return ks * _dlog_abs_expm1(x)[0] - (x + c) / var

    # Bracket the zero of the slope, then bisect for the mode.
    lo = np.full(ks.shape, 1e-300 if positive else -1.0)
    hi = np.full(ks.shape, 1.0 if positive else -1e-300)
    if positive:
        while np.any(grow := slope(hi) > 0):
            hi = np.where(grow, hi * 2.0, hi)
    else:
        while np.any(grow := slope(lo) < 0):
            lo = np.where(grow, lo * 2.0, lo)
    for _ in range(200):
        mid = (lo + hi) / 2
        up = slope(mid) > 0
        lo, hi = np.where(up, mid, lo), np.where(up, hi, mid)
    mode = (lo + hi) / 2

    curvature = -ks * _dlog_abs_expm1(mode)[1] + 1.0 / var
    width = 1.0 / np.sqrt(curvature)
    x = mode[:, None] + width[:, None] * _GRID[None, :]
    inside = sign * x > 0  # keep the half-line only
    log_f = ks[:, None] * _log_abs_expm1(x) - (x + c) ** 2 / (2 * var)
    log_f = np.where(inside, log_f, -np.inf) - 0.5 * np.log(2 * np.pi * var)
    step = width * (_GRID[1] - _GRID[0])
    return logsumexp(log_f, axis=1) + np.log(step)


def log_central_moments(sigma: float, max_order: int) -> np.ndarray:
    """log D_k for even k = 0, 2, ..., indexed by k (odd entries are NaN). Read-only.

    Cached: the moments depend on sigma alone, while an accountant asks for them once per
    (label, sampling rate) at each sigma it tries (a paper-accounting job's calibration made
    216 calls for 6 distinct sigmas, 33 s of quadrature on two cores instead of 1 s).
    """
    return _log_central_moments(float(sigma), int(max_order))


@functools.lru_cache(maxsize=256)
def _log_central_moments(sigma: float, max_order: int) -> np.ndarray:
    c = 1.0 / (2.0 * sigma**2)
    ks = np.arange(2, max_order + 2, 2, dtype=float)
    out = np.full(max_order + 2, np.nan)
    out[0] = 0.0
    out[2::2] = np.logaddexp(
        _half_line_log_integral(ks, c, positive=True),
        _half_line_log_integral(ks, c, positive=False),
    )
    out.flags.writeable = False  # shared by every caller of the cache
    return out


def _log_comb(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    from scipy.special import gammaln

    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def subsampled_gaussian_rdp(
    fraction: float, sigma: float, orders: np.ndarray = ORDERS
) -> np.ndarray:
    """RDP at integer ``orders`` of the Gaussian mechanism on a fixed-size subsample.

    ``fraction`` is sample size over partition size. Never larger than the Gaussian's own RDP.
    """
    from scipy.special import logsumexp

    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"sampling fraction must be in [0, 1], got {fraction}")
    if fraction == 0.0:
        return np.zeros(orders.shape)
    if sigma == 0:
        return np.full(orders.shape, np.inf)
    plain = gaussian_rdp(sigma, orders)
    max_order = int(orders.max())
    log_d = log_central_moments(sigma, max_order)
    js = np.arange(2, max_order + 1)
    eps_j = js / (2.0 * sigma**2)

    log_moment = np.empty(js.shape)
    log_moment[0] = np.log(4.0) + log_d[2]
    odd_or_even = js[1:]
    lower = 2 * (odd_or_even // 2)
    upper = 2 * ((odd_or_even + 1) // 2)
    log_moment[1:] = np.log(4.0) + 0.5 * (log_d[lower] + log_d[upper])
    log_cap = np.log(2.0) + (js - 1) * eps_j
    log_cap[0] = np.log(2.0) + eps_j[0]  # j = 2: 2 e^{eps(2)}
    log_term_j = np.minimum(log_moment, log_cap) + js * np.log(fraction)

    a = orders[:, None].astype(float)
    j = js[None, :].astype(float)
    terms = np.where(j <= a, _log_comb(a, j) + log_term_j[None, :], -np.inf)
    log_a = logsumexp(np.concatenate([np.zeros((len(orders), 1)), terms], axis=1), axis=1)
    return np.minimum(log_a / (orders - 1), plain)


def poisson_subsampled_gaussian_rdp(
    rate: float, sigma: float, orders: np.ndarray = ORDERS
) -> np.ndarray:
    """RDP at integer ``orders`` of the Gaussian mechanism on a Poisson subsample of
    ``rate`` (add/remove neighbours; Mironov, Talwar and Zhang 2019, exact), summed in log
    space. The Gaussian's own RDP at rate 1, 0 at rate 0, infinite without noise."""
    from scipy.special import logsumexp

    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"sampling rate must be in [0, 1], got {rate}")
    if rate == 0.0:
        return np.zeros(np.shape(orders))
    if sigma == 0:
        return np.full(np.shape(orders), np.inf)
    if rate == 1.0:
        return gaussian_rdp(sigma, np.asarray(orders))
    a = np.asarray(orders, dtype=float)[:, None]
    k = np.arange(0, int(np.max(orders)) + 1, dtype=float)[None, :]
    with np.errstate(invalid="ignore"):
        terms = (
            _log_comb(a, np.minimum(k, a))
            + (a - k) * math.log1p(-rate)
            + k * math.log(rate)
            + (k * k - k) / (2.0 * sigma**2)
        )
    terms = np.where(k <= a, terms, -np.inf)
    return np.maximum(logsumexp(terms, axis=1), 0.0) / (a[:, 0] - 1)


def rdp_to_epsilon(rdp: np.ndarray, delta: float, orders: np.ndarray = ORDERS) -> float:
    """Smallest epsilon over ``orders`` by the conversion of Balle et al. (2020)."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    with np.errstate(invalid="ignore"):
        eps = rdp + np.log1p(-1.0 / orders) - (np.log(delta) + np.log(orders)) / (orders - 1)
    eps = np.where(np.isnan(eps), np.inf, eps)
    return float(max(0.0, np.min(eps)))
