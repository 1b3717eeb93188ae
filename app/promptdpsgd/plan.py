"""Planning a PromptDPSGD job from public inputs and a DP count.

The sampling rate is ``batch_size / n``, and ``n`` is private (``app.privacy.unit``): the
plan takes it from the dataset's one count release (the sum of its labels' estimates),
charged once on the dataset's ledger, unless the data owner declared the counts public
(``config.public_counts``). Admission plans the job; the worker rebuilds the same plan
from what the job row stored (:func:`calibrated_plan` reads no record and draws no
randomness).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.privacy.accounting import Accounting
from app.privacy.calibration import CalibrationError
from app.privacy.dpsgd import calibrate_dpsgd, dpsgd_epsilon, dpsgd_sampling
from app.privacy.events import DpsgdEvent, GaussianEvent
from app.privacy.sampling import Sampling
from app.privacy.unit import DEFAULT_DELTA
from app.promptdpsgd.config import PromptDpsgdConfig, PromptDpsgdError
from app.synthesis.tasks import TaskKind, TaskSpec

METHOD = "promptdpsgd"


@dataclass(frozen=True)
class PromptDpsgdPlan:
    """Everything about a PromptDPSGD job fixed before it reads a private record."""

    config: PromptDpsgdConfig
    # The records the sampling rate divides by: the sum of the dataset's released label
    # counts' estimates, or the declared-public count. Public or DP: it may be written.
    n_planned: int
    delta: float
    noise_multiplier: float  # sigma: noise std / clip_norm
    # Jobs planned before the dataset-level release: their own count release's multiplier,
    # priced in their event. None for every job planned since.
    count_sigma: float | None = None
    release_id: str = ""  # the dataset's count release the count comes from ("": public)

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
            "count_release": self.release_id or None,
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
            "noise_std": self.noise_multiplier * self.config.clip_norm,
            "sampling_rate": self.sampling.rate,
        }


def plan_promptdpsgd(
    task: TaskSpec, n_planned: int, config: PromptDpsgdConfig, release_id: str = ""
) -> PromptDpsgdPlan:
    """Validate a job and calibrate its noise multiplier to ``config.epsilon``, sampling from
    ``n_planned`` records: declared public (``config.public_counts``) or the estimate of the
    dataset's count release (``release_id``), never an exact private count.

    Raises :class:`PromptDpsgdError` with a message naming settings and public or released
    counts only. Deterministic: the worker's rebuild is this same call."""
    if task.kind != TaskKind.CLASSIFICATION:
        raise PromptDpsgdError(
            f"PromptDPSGD needs a classification task; task {task.name!r} is {task.kind.value}"
        )
    delta = config.delta if config.delta is not None else DEFAULT_DELTA
    if config.public_counts and n_planned < 1:
        raise PromptDpsgdError("no private records: PromptDPSGD trains on them")
    if config.accounting is Accounting.PAPER and not config.public_counts:
        raise PromptDpsgdError(
            "paper accounting draws batches of exactly batch_size from a known number of "
            "records, which needs the record count public: have the data owner declare the "
            "counts public (public_counts) or use tight accounting"
        )
    n_planned = max(1, n_planned)
    if config.batch_size > n_planned:
        what = "private record(s)" if config.public_counts else "records the counts estimate"
        raise PromptDpsgdError(f"batch_size {config.batch_size} exceeds the {n_planned} {what}")
    return calibrated_plan(config, n_planned, delta, release_id=release_id)


def calibrated_plan(
    config: PromptDpsgdConfig,
    n_planned: int,
    delta: float,
    count_sigma: float | None = None,
    release_id: str = "",
) -> PromptDpsgdPlan:
    """The plan of a job sampling from ``n_planned`` records, its noise calibrated so that
    the job (and, for a job planned before the dataset-level release, its own count release
    of multiplier ``count_sigma``) meets ``config.epsilon``. Deterministic."""
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
        n_planned=n_planned,
        delta=delta,
        noise_multiplier=sigma,
        count_sigma=count_sigma,
        release_id=release_id,
    )
