"""Noise calibration: solve for the token loop's free noise multiplier that meets a target
(epsilon, delta). (Contextual calibration, in evaluation, is :mod:`app.eval.icl`'s.)

The free multiplier is sigma for DP few-shot generation and sigma1 for AdaDPSyn (sigma0,
sigma2 and T stay as given). Epsilon decreases monotonically in the multiplier, so a bracketed
search on log(multiplier) converges; the answer is always on the safe side: the returned
privacy's epsilon never exceeds the target and is within ``rel_tol`` below it.
The search brackets the answer by doubling or halving from 1 and then refines it by the
Illinois variant of false position on (log multiplier, log epsilon).

The answer is a function of public inputs only, so it is remembered by them
(:mod:`app.privacy.calibration_cache`): a shape seen before costs a lookup, not a search.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.privacy import calibration_cache
from app.privacy.budget import is_epsilon
from app.privacy.display import distinct_epsilons
from app.privacy.noise_search import CalibrationError, smallest_noise
from app.privacy.synthesis import SynthesisPrivacy

MIN_MULTIPLIER = 1e-2
MAX_MULTIPLIER = 1e4


@dataclass(frozen=True)
class Calibration:
    privacy: SynthesisPrivacy  # with the free multiplier set
    multiplier: float
    epsilon: float


@dataclass(frozen=True)
class NoiseTarget:
    """What the search reads besides the privacy model, as one value: the search, its cache
    key (:func:`calibration_inputs`) and :func:`calibrate_noise` then share one list of
    inputs, so an input added here cannot be missing from the key."""

    label_sizes: Mapping[str, int]
    shots: Mapping[str, int]
    target_epsilon: float
    delta: float
    rel_tol: float = 5e-3
    max_iter: int = 60

    def epsilon(self, privacy: SynthesisPrivacy, multiplier: float) -> float:
        """The job's epsilon at ``delta`` with the free multiplier set to ``multiplier``."""
        return privacy.with_free_multiplier(multiplier).epsilon(
            self.label_sizes, self.shots, self.delta
        )


def calibrate_noise(
    privacy: SynthesisPrivacy,
    *,
    label_sizes: Mapping[str, int],
    shots: Mapping[str, int],
    target_epsilon: float,
    delta: float,
    rel_tol: float = 5e-3,
    max_iter: int = 60,
) -> Calibration:
    """Smallest multiplier (within ``rel_tol`` in epsilon) whose epsilon is <= the target.

    Remembered by every input the search reads (:func:`calibration_inputs`); a remembered
    answer rebuilds the privacy model exactly as the search does."""
    if not is_epsilon(target_epsilon):
        raise CalibrationError(f"target epsilon must be a positive number, got {target_epsilon}")
    target = NoiseTarget(label_sizes, shots, target_epsilon, delta, rel_tol, max_iter)
    key = calibration_cache.calibration_key(calibration_inputs(privacy, target))
    cached = calibration_cache.lookup(key)
    if cached is not None:
        # The guarantee never rests on a remembered number (the shared store is a database
        # row): the epsilon is recomputed from the multiplier, one accountant call instead of
        # a search, and an answer that does not meet the target is searched afresh.
        multiplier = cached[0]
        epsilon = target.epsilon(privacy, multiplier)
        if epsilon <= target_epsilon:
            return Calibration(privacy.with_free_multiplier(multiplier), multiplier, epsilon)
    result = search_noise(privacy, target)
    calibration_cache.remember(key, (result.multiplier, result.epsilon))
    return result


def calibration_inputs(privacy: SynthesisPrivacy, target: NoiseTarget) -> dict[str, Any]:
    """Everything :func:`search_noise` reads, as JSON values: the cache key's contents.
    The whole privacy model is included (the free multiplier's starting value too, which the
    search ignores: a needless miss at worst, never a wrong hit)."""
    return {
        "privacy": privacy.model_dump(mode="json"),
        "label_sizes": {str(k): int(v) for k, v in target.label_sizes.items()},
        "shots": {str(k): int(v) for k, v in target.shots.items()},
        "target_epsilon": float(target.target_epsilon),
        "delta": float(target.delta),
        "rel_tol": float(target.rel_tol),
        "max_iter": int(target.max_iter),
        "range": [MIN_MULTIPLIER, MAX_MULTIPLIER],
    }


def search_noise(privacy: SynthesisPrivacy, target: NoiseTarget) -> Calibration:
    """The search itself (:func:`app.privacy.noise_search.smallest_noise`), never cached
    (what :func:`calibrate_noise` remembers)."""
    target_epsilon, delta = target.target_epsilon, target.delta

    def refusal(multiplier: float, epsilon: float) -> str:
        # a cost above the target never prints as the target (app.privacy.display)
        cost = distinct_epsilons(epsilon, target_epsilon)[0]
        return (
            f"target epsilon {target_epsilon:g} at delta {delta:g} cannot be met: even with "
            f"the free noise multiplier at {multiplier:g} the job costs {cost} (the "
            "fixed mechanisms or the number of tokens already exceed the budget; raise "
            "sigma0/sigma2, lower T, tmax, shots or M*N, or ask for a larger epsilon)"
        )

    found = smallest_noise(
        lambda multiplier: target.epsilon(privacy, multiplier),
        target_epsilon,
        low=MIN_MULTIPLIER,
        high=MAX_MULTIPLIER,
        rel_tol=target.rel_tol,
        max_iter=target.max_iter,
        refusal=refusal,
    )
    return Calibration(privacy.with_free_multiplier(found.noise), found.noise, found.epsilon)
