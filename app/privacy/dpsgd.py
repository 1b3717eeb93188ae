"""DP-SGD's privacy side: the clip-and-noise mechanism, its sampling and its calibration.

One DP-SGD step (Abadi et al. 2016) samples a batch, computes each example's gradient,
clips each to L2 norm ``C``, sums them and adds Gaussian noise of standard deviation
``sigma * C``. Only that noisy sum leaves the step; the trainer
(:mod:`app.promptdpsgd.train`) divides it by the expected batch size and takes an optimiser
step, which is post-processing.

Sensitivity of the clipped sum, per neighbouring relation:

* add/remove one record (tight accountant, Poisson sampling): the record contributes one
  clipped gradient or none, so the sum moves by at most ``C``; the noise multiplier relative
  to the sensitivity is ``sigma``.
* replace one record (paper accountant, fixed-size sampling without replacement): one
  clipped gradient becomes another, so the sum moves by at most ``2C`` (two vectors of norm
  at most ``C``); the multiplier relative to the sensitivity is ``sigma / 2``.

The event (:class:`~app.privacy.events.DpsgdEvent`) stores ``sigma`` (noise std over ``C``)
and converts it per relation, so the same job is priced correctly by either accountant. The
batch is drawn from *all* records (not a label partition), so the event joins every exposure
group of the ledger. No I/O, no torch: per-example gradients arrive as a numpy matrix.

The records ``n`` that the sampling rate ``batch_size / n`` divides by are a public count
(declared so by the data owner) or the Gaussian release of the dataset's count
(``app.privacy.unit``), whose multiplier ``count_sigma`` the event carries and the
calibration prices with the steps: the rate is then a post-processing of a DP
output, and Poisson sampling at any rate fixed before the step is amplified as analysed
for add/remove neighbours, whatever the true ``n``.
"""

from __future__ import annotations

import numpy as np

from app.privacy import releases
from app.privacy.accounting import Accounting, accountant_for, sampling_for
from app.privacy.budget import is_epsilon
from app.privacy.calibration import MAX_MULTIPLIER, MIN_MULTIPLIER, CalibrationError
from app.privacy.events import DpsgdEvent, GaussianEvent, Sensitivity
from app.privacy.noise_search import smallest_noise
from app.privacy.sampling import Sampling


def dpsgd_sampling(accounting: Accounting, *, n: int, batch_size: int) -> Sampling:
    """How a step samples its batch from ``n`` records: Poisson with rate ``batch_size / n``
    (tight), or exactly ``batch_size`` records without replacement (paper). The same
    function that decides the token loop's sampling decides this one (one group)."""
    if batch_size > n and accounting is Accounting.PAPER:
        raise ValueError(f"a batch of {batch_size} cannot be drawn from {n} records")
    return sampling_for(accounting, n_label=n, M=1, N=batch_size)


def dpsgd_event(
    noise_multiplier: float,
    accounting: Accounting,
    *,
    n: int,
    batch_size: int,
    steps: int,
    count_sigma: float | None = None,
) -> DpsgdEvent:
    """The event of a job of ``steps`` steps with noise std ``noise_multiplier * C``,
    sampled from ``n`` records (public, or released with multiplier ``count_sigma``)."""
    sampling = dpsgd_sampling(accounting, n=n, batch_size=batch_size)
    release = None if count_sigma is None else GaussianEvent(count_sigma)
    return DpsgdEvent(noise_multiplier, sampling, steps, release)


def dpsgd_epsilon(event: DpsgdEvent, accounting: Accounting, delta: float) -> float:
    """Epsilon at ``delta`` of one DP-SGD job under ``accounting``."""
    return accountant_for(accounting).dataset_epsilon(event, delta)


def calibrate_dpsgd(
    *,
    target_epsilon: float,
    delta: float,
    accounting: Accounting,
    n: int,
    batch_size: int,
    steps: int,
    count_sigma: float | None = None,
    rel_tol: float = 5e-3,
    max_iter: int = 60,
) -> tuple[float, float]:
    """Smallest ``sigma`` (noise std over ``C``) whose job epsilon, the count release of
    multiplier ``count_sigma`` included, is <= the target, within ``rel_tol`` below it, and
    that epsilon (epsilon decreases in sigma: :func:`app.privacy.noise_search.smallest_noise`,
    the safe side). The refusal names ``n`` only when it is public (``count_sigma`` None)."""
    if not is_epsilon(target_epsilon):
        raise CalibrationError(f"target epsilon must be a positive number, got {target_epsilon}")

    def eps(sigma: float) -> float:
        event = dpsgd_event(
            sigma, accounting, n=n, batch_size=batch_size, steps=steps, count_sigma=count_sigma
        )
        return dpsgd_epsilon(event, accounting, delta)

    def refusal(_sigma: float, _epsilon: float) -> str:
        records = f" of {n} records" if count_sigma is None else ""
        return (
            f"target epsilon {target_epsilon:g} at delta {delta:g} cannot be met with "
            f"{steps} steps at batch size {batch_size}{records} (lower steps or "
            "batch_size, or ask for a larger epsilon)"
        )

    found = smallest_noise(
        eps,
        target_epsilon,
        low=MIN_MULTIPLIER,
        high=MAX_MULTIPLIER,
        rel_tol=rel_tol,
        max_iter=max_iter,
        refusal=refusal,
    )
    return found.noise, found.epsilon


def check_any_count_meets(
    *,
    target_epsilon: float,
    delta: float,
    batch_size: int,
    steps: int,
    count_sigma: float,
) -> None:
    """Refuse, from public inputs only, a tight-accounted job that no released count could
    let meet its target: epsilon grows with the sampling rate at a fixed ``sigma``, so a job
    that meets it at rate 1 with the largest multiplier meets it at any rate
    ``batch_size / n~``, and calibration after the count release cannot fail. So whether a
    job is refused never depends on the released count (a refused job is never charged)."""
    worst = dpsgd_event(
        MAX_MULTIPLIER,
        Accounting.TIGHT,
        n=batch_size,  # rate 1
        batch_size=batch_size,
        steps=steps,
        count_sigma=count_sigma,
    )
    if dpsgd_epsilon(worst, Accounting.TIGHT, delta) > target_epsilon:
        raise CalibrationError(
            f"target epsilon {target_epsilon:g} at delta {delta:g} cannot be guaranteed with "
            f"{steps} steps whatever the number of records, which is counted under DP (lower "
            "steps, ask for a larger epsilon, or have the data owner declare the counts public)"
        )


def clip_rows(per_example: np.ndarray, clip_norm: float) -> np.ndarray:
    """Each row (one example's flattened gradient) scaled to L2 norm at most ``clip_norm``.

    Scaling by ``min(1, C / ||g||)`` keeps the direction; a zero row stays zero."""
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
    grads = np.asarray(per_example, dtype=np.float64)
    norms = np.linalg.norm(grads, axis=1, keepdims=True)
    factor = np.minimum(1.0, clip_norm / np.maximum(norms, 1e-300))
    return grads * factor


def noisy_clipped_sum(
    per_example: np.ndarray,
    *,
    clip_norm: float,
    noise_multiplier: float,
    rng: np.random.Generator,
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """The Gaussian mechanism of one DP-SGD step: ``sum_i clip(g_i) + N(0, (sigma C)^2 I)``.

    ``per_example`` is ``B x D`` (B may be 0: the step still releases noise alone, so an
    empty Poisson batch reveals nothing more than a full one). Sensitivity: ``C`` under
    add/remove, ``2C`` under replace-one (module docstring); ``noise_multiplier`` is
    ``sigma`` = noise std / ``C``. ``rng`` is the job's generator
    (:func:`app.privacy.rng.make_rng`), never reseeded here. ``shape`` reshapes the result
    (default: a vector of length D).
    """
    grads = np.asarray(per_example, dtype=np.float64)
    if grads.ndim != 2:
        raise ValueError(f"per-example gradients must be B x D, got shape {grads.shape}")
    total = clip_rows(grads, clip_norm).sum(axis=0)
    std = noise_multiplier * clip_norm
    sensitivity = Sensitivity(add_or_remove=clip_norm, replace_one=2 * clip_norm)  # CLIPPED_SUM
    total = releases.gaussian_release(total, GaussianEvent(std, sensitivity=sensitivity), rng)
    return total.reshape(shape) if shape is not None else total
