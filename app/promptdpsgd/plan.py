"""Planning a PromptDPSGD job from public inputs and a DP count.

The sampling rate is ``batch_size / n``, and ``n`` is private (issue 32,
``app.privacy.unit``): the plan takes it from a Gaussian release of the dataset's record
count, charged with the steps in the job's event, unless the data owner declared the count
public (``config.public_counts``). Admission plans the job (and draws that release, once);
the worker rebuilds the same plan from what the job row stored (:func:`calibrated_plan`
reads no record and draws no randomness).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.privacy.accounting import Accounting
from app.privacy.calibration import CalibrationError
from app.privacy.dpsgd import (
    calibrate_dpsgd,
    check_any_count_meets,
    dpsgd_epsilon,
    dpsgd_sampling,
)
from app.privacy.events import DpsgdEvent, GaussianEvent
from app.privacy.rng import make_rng
from app.privacy.sampling import Sampling
from app.privacy.unit import DEFAULT_DELTA, count_noise_multiplier, release_counts
from app.promptdpsgd.config import PromptDpsgdConfig, PromptDpsgdError
from app.synthesis.tasks import TaskKind, TaskSpec

METHOD = "promptdpsgd"


@dataclass(frozen=True)
class PromptDpsgdPlan:
    """Everything about a PromptDPSGD job fixed before it reads a private record."""

    config: PromptDpsgdConfig
    # Exact: the run checks the records against it; never written into what a job releases.
    n_private: int
    # The records the sampling rate divides by: the released count (``count_sigma``) or the
    # declared-public one (then ``n_private``). Public or DP: it may be written.
    n_planned: int
    delta: float
    noise_multiplier: float  # sigma: noise std / clip_norm
    count_sigma: float | None = None  # the count release's multiplier; None: count public

    @property
    def sampling(self) -> Sampling:
        return dpsgd_sampling(
            self.config.accounting, n=self.n_planned, batch_size=self.config.batch_size
        )

    def event(self) -> DpsgdEvent:
        release = None if self.count_sigma is None else GaussianEvent(self.count_sigma)
        return DpsgdEvent(self.noise_multiplier, self.sampling, self.config.steps, release)

    def epsilon(self) -> float:
        return dpsgd_epsilon(self.event(), self.config.accounting, self.delta)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-compatible data, recorded with the result (no record content and
        no exact count unless declared public)."""
        return {
            "method": METHOD,
            "config": self.config.model_dump(mode="json"),
            "planned_records": self.n_planned,
            "count_noise_multiplier": self.count_sigma,
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
            "noise_std": self.noise_multiplier * self.config.clip_norm,
            "sampling_rate": self.sampling.rate,
        }


def plan_promptdpsgd(
    task: TaskSpec,
    n_private: int,
    config: PromptDpsgdConfig,
    rng: np.random.Generator | None = None,
) -> PromptDpsgdPlan:
    """Validate a job, release its record count unless public (with ``rng``, default the
    config's generator) and calibrate its noise multiplier to ``config.epsilon``, the release
    included.

    Raises :class:`PromptDpsgdError` with a message naming settings and public counts only;
    whether it refuses never depends on a private count (nor on the released one)."""
    if task.kind != TaskKind.CLASSIFICATION:
        raise PromptDpsgdError(
            f"PromptDPSGD needs a classification task; task {task.name!r} is {task.kind.value}"
        )
    delta = config.delta if config.delta is not None else DEFAULT_DELTA
    if config.public_counts:
        if n_private < 1:
            raise PromptDpsgdError("no private records: PromptDPSGD trains on them")
        if config.batch_size > n_private:
            raise PromptDpsgdError(
                f"batch_size {config.batch_size} exceeds the {n_private} private record(s)"
            )
        return calibrated_plan(config, n_private, n_private, delta)
    if config.accounting is Accounting.PAPER:
        raise PromptDpsgdError(
            "paper accounting draws batches of exactly batch_size from a known number of "
            "records, which needs the record count public: have the data owner declare the "
            "counts public (public_counts) or use tight accounting"
        )
    count_sigma = count_noise_multiplier(config.epsilon, delta)
    try:
        check_any_count_meets(
            target_epsilon=config.epsilon,
            delta=delta,
            batch_size=config.batch_size,
            steps=config.steps,
            count_sigma=count_sigma,
        )
    except CalibrationError as err:
        raise PromptDpsgdError(str(err)) from None
    generator = rng if rng is not None else make_rng(config.seed)
    released = release_counts({"records": n_private}, count_sigma, generator)["records"]
    return calibrated_plan(config, n_private, released, delta, count_sigma)


def calibrated_plan(
    config: PromptDpsgdConfig,
    n_private: int,
    n_planned: int,
    delta: float,
    count_sigma: float | None = None,
) -> PromptDpsgdPlan:
    """The plan of a job sampling from ``n_planned`` records (public, or released with
    multiplier ``count_sigma``): its noise calibrated so that the whole job, the release
    included, meets ``config.epsilon``. Deterministic: the worker's rebuild."""
    try:
        sigma, _ = calibrate_dpsgd(
            target_epsilon=config.epsilon,
            delta=delta,
            accounting=config.accounting,
            n=n_planned,
            batch_size=config.batch_size,
            steps=config.steps,
            count_sigma=count_sigma,
        )
    except (CalibrationError, ValueError) as err:
        raise PromptDpsgdError(str(err)) from None
    return PromptDpsgdPlan(
        config=config,
        n_private=n_private,
        n_planned=n_planned,
        delta=delta,
        noise_multiplier=sigma,
        count_sigma=count_sigma,
    )
