"""The one search for the smallest noise that meets a target epsilon, for every method.

A mechanism built from a noise parameter (a multiplier, a standard deviation over the
clipping norm, 1/mu of a GDP filter) costs less the more noise it has, so "the least noise
whose epsilon is at most the target" is one monotone root: :func:`smallest_noise` finds it
for any ``epsilon_of(noise)`` (an event built from the parameter, priced by an accountant).
The token loop, PromptPATE and PromptDPSGD calibrate through it, and a plug-in calibrates
its own event the same way (``app.methods.smallest_noise``), as dp_accounting's
``calibrate_dp_mechanism`` serves every mechanism there.

The answer is always on the safe side: its epsilon never exceeds the target, and it is
within ``rel_tol`` below it (or the search stopped at ``low``, where even less noise would
be allowed but is not offered). The search brackets the root by doubling or halving from
``start``, then refines it by the Illinois variant of false position on (log noise, log
epsilon), which is nearly linear there; a guess outside the bracket falls back to bisection.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


class CalibrationError(ValueError):
    """No noise up to the search's upper bound meets the target; the message says why."""


@dataclass(frozen=True)
class NoiseFound:
    noise: float  # the least noise found that meets the target
    epsilon: float  # its epsilon (at most the target)


def smallest_noise(
    epsilon_of: Callable[[float], float],
    target: float,
    *,
    low: float = 1e-2,
    high: float = 1e4,
    start: float = 1.0,
    rel_tol: float = 5e-3,
    max_iter: int = 60,
    refusal: Callable[[float, float], str] | None = None,
) -> NoiseFound:
    """The least noise in [``low``, ``high``] whose ``epsilon_of`` is at most ``target``,
    within ``rel_tol`` of it. ``epsilon_of`` must not increase with the noise.
    :class:`CalibrationError` if even ``high`` costs more (``refusal(noise, epsilon)``
    words it)."""
    lo = hi = start
    eps_lo = eps_hi = epsilon_of(start)
    while eps_hi > target:  # too little noise: double it
        if hi >= high:
            raise CalibrationError(
                refusal(hi, eps_hi)
                if refusal is not None
                else f"epsilon {target:g} cannot be met: at noise {hi:g} it is {eps_hi:.4g}"
            )
        lo, eps_lo = hi, eps_hi
        hi = min(2 * hi, high)
        eps_hi = epsilon_of(hi)
    while eps_lo <= target:  # enough noise already: halve it while it still fits
        if lo <= low:
            return NoiseFound(lo, eps_lo)
        hi, eps_hi = lo, eps_lo
        lo = max(lo / 2, low)
        eps_lo = epsilon_of(lo)
    return _refine(epsilon_of, target, (lo, eps_lo), (hi, eps_hi), rel_tol, max_iter)


def _refine(
    epsilon_of: Callable[[float], float],
    target: float,
    above: tuple[float, float],
    below: tuple[float, float],
    rel_tol: float,
    max_iter: int,
) -> NoiseFound:
    """Illinois false position between ``above`` (too little noise: epsilon over the
    target) and ``below`` (enough), on log scales; returns the ``below`` end."""

    def gap(value: float) -> float:
        return math.log(max(value, 1e-300)) - math.log(target)

    (lo, eps_lo), (hi, eps_hi) = above, below
    a, b = math.log(lo), math.log(hi)
    fa, fb = gap(eps_lo), gap(eps_hi)
    side = 0
    for _ in range(max_iter):
        if eps_hi >= target * (1 - rel_tol) or b - a < 1e-9:
            break
        guess = b - fb * (b - a) / (fb - fa) if math.isfinite(fa) else (a + b) / 2
        if not a < guess < b:
            guess = (a + b) / 2
        mid = math.exp(guess)
        eps_mid = epsilon_of(mid)
        if eps_mid > target:
            a, fa = guess, gap(eps_mid)
            if side == -1:
                fb /= 2
            side = -1
        else:
            b, fb, hi, eps_hi = guess, gap(eps_mid), mid, eps_mid
            if side == 1:
                fa /= 2
            side = 1
    return NoiseFound(hi, eps_hi)
