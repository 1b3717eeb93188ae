"""Planning a PromptPATE job from public sizes alone.

The service plans a job at admission (to reserve its privacy charge) and again in the worker
(to run it), and compares the two events: so planning reads no record, draws no randomness
and gives the same plan for the same sizes and config.

Nothing planned depends on the number of private records (``app.privacy.unit``):
the teachers are ``config.teachers`` (a setting, not a share of the records), the noise and
the filter budget follow from epsilon, delta (a public default, never 1/|D|) and the public
dataset's size. That count is read only to refuse a job that cannot fill one teacher prompt,
and only when the data owner declared it public; otherwise short teachers abstain and the
noisy threshold check decides. The answered-query counts a run reports are functions of the
threshold checks' noisy outcomes (post-processing of DP outputs), not of the partition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.pate.config import PateConfig, PateError
from app.privacy.events import PateEvent
from app.privacy.pate import PatePrivacy, plan_pate_privacy
from app.privacy.unit import DEFAULT_DELTA
from app.synthesis.tasks import TaskKind, TaskSpec


@dataclass(frozen=True)
class PatePlan:
    """Everything about a PromptPATE job that is fixed before it reads a private record."""

    config: PateConfig
    privacy: PatePrivacy
    # The count declared public by the data owner (0 when it is not: nothing is planned from
    # it); never written into what a job releases.
    n_private: int
    n_public: int  # public inputs the job processes at most: min(max_public, available)
    delta: float

    @property
    def threshold(self) -> float:
        """Confident-GNMax threshold in votes."""
        return self.privacy.aggregator.threshold

    def event(self) -> PateEvent:
        """What the ledger charges: the filter's budget, whatever the run spends."""
        return self.privacy.event()

    def epsilon(self) -> float:
        return self.privacy.epsilon(self.delta)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-compatible data, recorded with the result (no record content)."""
        agg = self.privacy.aggregator
        return {
            "method": "promptpate",
            "config": self.config.model_dump(mode="json"),
            "n_public": self.n_public,
            "delta": self.delta,
            "threshold": agg.threshold,
            "relation": str(agg.relation),
            "sigma_threshold": agg.sigma_threshold,
            "sigma_gnmax": agg.sigma_gnmax,
            "mu_threshold": agg.mu_threshold,
            "mu_gnmax": agg.mu_gnmax,
            "budget_mu": self.privacy.budget_mu,
        }


def public_count(n_available: int, config: PateConfig) -> int:
    """Public inputs a job processes at most, out of ``n_available``."""
    return min(config.max_public, n_available)


def plan_pate(task: TaskSpec, n_private: int, n_public: int, config: PateConfig) -> PatePlan:
    """Validate a job and calibrate its noise and filter budget to ``config.epsilon``.

    ``n_private`` is the number of private records, ``n_public`` the number of public inputs
    available (the job uses at most ``config.max_public``). Fewer records than
    ``teachers x shots`` is allowed (short teachers abstain). When the owner declared the
    count public, at least one teacher must be able to fill its prompt; otherwise the count
    is not read at all. Raises :class:`PateError` (or the calibration's ValueError) with a
    message naming settings and public counts only.
    """
    if task.kind != TaskKind.CLASSIFICATION:
        raise PateError(
            f"PromptPATE needs a classification task; task {task.name!r} is {task.kind.value}"
        )
    if config.public_counts and n_private < config.shots:
        raise PateError(
            f"{n_private} private record(s) cannot fill one teacher prompt of "
            f"{config.shots} shot(s): no teacher could vote"
        )
    if n_public < 1:
        raise PateError("no public inputs: PromptPATE labels public inputs with the teachers")
    used = public_count(n_public, config)
    answerable = min(config.queries, used)
    if answerable < config.student_shots + 1:
        raise PateError(
            f"at most {answerable} public inputs can be labelled (queries={config.queries}, "
            f"public inputs={used}) but a student prompt of {config.student_shots} shots "
            f"needs at least {config.student_shots + 1} (its shots and a holdout)"
        )
    delta = config.delta if config.delta is not None else DEFAULT_DELTA
    privacy = plan_pate_privacy(
        epsilon=config.epsilon,
        delta=delta,
        accounting=config.accounting,
        threshold=config.threshold_fraction * config.teachers,
        queries=config.queries,
        n_public=used,
        sigma_ratio=config.sigma_ratio,
        sigma_threshold=config.sigma_threshold,
        sigma_gnmax=config.sigma_gnmax,
    )
    return PatePlan(config=config, privacy=privacy, n_private=n_private, n_public=used, delta=delta)
