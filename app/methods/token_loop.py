"""The token loop (``app.synthesis``): demonstrations generated token by token from noisy
aggregates of teacher distributions, with Tang et al.'s or AdaDPSyn's aggregator.

One class, one instance per aggregator: the two share parameters, config and plan, and differ
in the mechanism a token step runs (``SynthesisConfig.method``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from app.llm.base import LLMBackend
from app.privacy.accounting import Accounting
from app.privacy.events import SynthesisEvent
from app.privacy.params import Method as Aggregator
from app.privacy.plan import PrivacyPlan
from app.privacy.rng import make_rng
from app.results import SynthesisResult
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import Record
from app.synthesis.generator import JobPlan, plan_job, synthesize
from app.synthesis.tasks import TaskSpec

from .base import (
    Counts,
    Method,
    MethodPlan,
    Progress,
    Stored,
    client_overrides,
    config_error,
    optional_params,
)
from .kinds import MethodKind

# SynthesisConfig leaves most of these undescribed (their defaults depend on the task or M).
_DESCRIPTIONS = {
    "M": "Teacher subsets per token (default: the task's, from the AdaDPSyn paper).",
    "N": "Records per teacher subset (default: the task's).",
    "tmax": "Maximum tokens per demonstration (default: the task's).",
    "sigma0": "AdaDPSyn GoodRadius noise multiplier (default: the variant's row for M).",
    "sigma2": "AdaDPSyn coverage-check noise multiplier (default: the variant's row for M).",
    "T": "AdaDPSyn rounds of radius reduction (default: the variant's row for M).",
    "lam": "AdaDPSyn noise margin factor lambda (default: the variant's row for M).",
    "variant": "AdaDPSyn: 'pooled' (every charged mean is used) or 'paper' (Algorithm 1 as "
    "published).",
}
# What a client may set; epsilon, delta, accounting and shots are the job's own fields, and
# a seed (which makes the noise predictable) never comes from a client.
PARAMS = ("M", "N", "tmax", "K", "variant", "sigma0", "sigma2", "T", "lam")


@dataclass(frozen=True)
class TokenLoopPlan(MethodPlan):
    """A :class:`JobPlan` (label schedule drawn, noise calibrated) behind the method plan."""

    job: JobPlan

    @property
    def delta(self) -> float:
        return self.job.delta

    def event(self) -> SynthesisEvent:
        return self.job.event()

    def epsilon(self) -> float:
        return self.job.epsilon()

    @property
    def progress_total(self) -> int:
        return len(self.job.schedule) * self.job.config.tmax

    @property
    def expected_records(self) -> int:
        return sum(self.job.sizes.values())

    def stored(self) -> Stored:
        return Stored(
            config={
                "synthesis": self.job.config.model_dump(mode="json"),
                "plan": self.job.plan.model_dump(mode="json"),
                "sizes": self.job.sizes,
                "planner": self.job.planner,
            },
            schedule=list(self.job.schedule),
            delta=self.job.delta,
        )

    def run(
        self,
        records: list[Record],
        backend: LLMBackend,
        progress: Progress | None,
        public: Sequence[str] = (),
    ) -> SynthesisResult:
        job = self.job
        # A seeded run (CLI and studies only) replans inside ``synthesize`` from the seed:
        # the same plan, deterministically, and the one generator stream seeded runs have
        # always used for both the schedule and the noise.
        pinned = job if job.config.seed is None else None
        return synthesize(job.task, records, job.config, backend, progress=progress, job=pinned)


class TokenLoop(Method):
    """The token loop with one aggregator (``kind`` tang or adadpsyn)."""

    params: ClassVar[type[BaseModel]] = optional_params(
        "TokenLoopParams", SynthesisConfig, PARAMS, _DESCRIPTIONS
    )
    zero_epsilon_baseline: ClassVar[bool] = True  # instruction-only: epsilon = 0
    unit: ClassVar[str] = "tokens"
    verb: ClassVar[str] = "synthesising"
    cli_shots_option: ClassVar[str] = "--shots"

    def __init__(self, kind: MethodKind) -> None:
        self.kind = kind
        self.aggregator = Aggregator(kind.value)

    def configure(
        self,
        task: TaskSpec,
        *,
        epsilon: float,
        delta: float | None,
        shots: int | None,
        accounting: Accounting,
        params: Mapping[str, Any] | None,
        seed: int | None = None,
    ) -> SynthesisConfig:
        try:
            return SynthesisConfig.for_task(
                task.name,
                method=self.aggregator,
                epsilon=epsilon,
                delta=delta,
                shots=shots,
                accounting=accounting,
                seed=seed,
                **client_overrides(params),
            )
        except (ValidationError, TypeError) as err:
            raise config_error(err) from None

    def plan(self, task: TaskSpec, config: Any, counts: Counts) -> TokenLoopPlan:
        sizes = {str(k): int(v) for k, v in counts.labels.items()}
        return TokenLoopPlan(plan_job(task, sizes, config, make_rng(config.seed)))

    def rebuild(self, task: TaskSpec, stored: Stored) -> TokenLoopPlan:
        config = SynthesisConfig.model_validate(stored.config["synthesis"])
        plan = PrivacyPlan.model_validate(stored.config["plan"])
        sizes = {str(k): int(v) for k, v in stored.config["sizes"].items()}
        planner = dict(stored.config.get("planner") or {})  # absent for older jobs
        return TokenLoopPlan(
            JobPlan(task, config, plan, tuple(stored.schedule), sizes, stored.delta, planner)
        )

    def public_stats(self, result: SynthesisResult) -> dict[str, Any] | None:
        """The AdaDPSyn planner's choice (public inputs only); None for other runs."""
        planner = {k: v for k, v in result.stats.items() if k.startswith("planner_")}
        return planner or None

    def report(self, result: SynthesisResult) -> str | None:
        stats = result.stats
        if "planner_T" not in stats:
            return None
        if not stats["planner_checks"]:
            return "planner: no coverage checks (T = 0, Tang's mean) for this shape"
        return (
            f"planner: T {stats['planner_T']}, checks take {stats['planner_check_share']:.0%} "
            f"of each step's budget, mu {stats['planner_mu']}, margin "
            f"{stats.get('planner_margin', 0.0)}, shrink {stats['planner_shrink']}"
        )

    def summary(self, stored: Stored) -> tuple[str | None, int]:
        return stored.config.get("synthesis", {}).get("accounting"), len(stored.schedule)
