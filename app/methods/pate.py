"""PromptPATE (``app.pate``): teacher prompts built from the private records label the texts
of a public dataset under Confident-GNMax; the best labelled student prompt is the result.

It is the one method that also reads a public dataset; its plan needs only the public
dataset's record count (the private one is read only when declared public, to refuse a
dataset that cannot fill a teacher), and its public stats are functions of the noisy
outputs and public data alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from app.pate.config import PateConfig
from app.pate.plan import PatePlan, plan_pate
from app.pate.run import run_pate
from app.results import SynthesisResult
from app.synthesis.tasks import TaskSpec

from .base import Counts, CountsMode, Method, RunInputs, Stored, WrappedPlan
from .kinds import MethodKind
from .params import declare

# The job's own fields (the student prompt's size is the job's shots) and the seed, which a
# client never sets, are not parameters. On the command line a teacher's ``shots`` is
# ``--teacher-shots`` (``--shots`` is the job's) and the student ``candidates`` are
# ``--student-candidates`` (``--candidates`` are an extraction task's slot values).
PARAMETERS = declare(
    PateConfig,
    (
        name
        for name in PateConfig.model_fields
        if name not in {"epsilon", "delta", "accounting", "student_shots", "seed", "public_counts"}
    ),
    flags={"shots": "--teacher-shots", "candidates": "--student-candidates"},
)
SHOTS = declare(PateConfig, ("student_shots",))[0]
# What a run reports that the API shows: functions of the Confident-GNMax outputs (which
# queries passed the noisy threshold check, the noisy labels) and of public data only. A run
# reports no wall time: it depends on the private records' lengths, without noise.
PUBLIC_STATS = (
    "processed",
    "answered",
    "rejected",
    "budget_exhausted",
    "spent_mu",
    "budget_mu",
    "holdout_accuracy",
)


@dataclass(frozen=True)
class PromptPateMethodPlan(WrappedPlan):
    """PromptPATE's :class:`MethodPlan`: a :class:`PatePlan` with its task and the public
    dataset's record count."""

    task: TaskSpec
    plan: PatePlan
    public_available: int  # records of the public dataset (the job samples plan.n_public)

    @property
    def progress_total(self) -> int:
        return self.plan.n_public

    @property
    def public_records(self) -> int:
        return self.public_available

    def stored(self) -> Stored:
        return Stored(
            config={
                "pate": self.plan.config.model_dump(mode="json"),
                # private: the count declared public (0 otherwise: the plan reads none);
                # public: the public dataset's size.
                "sizes": {"private": self.plan.n_private, "public": self.public_available},
            },
            schedule=[],
            delta=self.plan.delta,
        )

    def execute(self, job: RunInputs) -> SynthesisResult:
        return run_pate(
            self.task, job.records, job.public, self.plan, job.backend, progress=job.progress
        )


class PromptPate(Method):
    """PromptPATE (Duan et al. 2023)."""

    name = MethodKind.PROMPTPATE.value
    title = "PromptPATE"
    parameters = PARAMETERS
    shots_param = SHOTS
    config_class = PateConfig
    stored_key: ClassVar[str] = "pate"
    public_stat_names = PUBLIC_STATS
    reads_public: ClassVar[bool] = True
    # nothing is planned from the private counts (only a declared-public count is read, to
    # refuse a dataset that cannot fill one teacher): a job causes no count release
    reads_counts: ClassVar[bool] = False
    unit: ClassVar[str] = "public inputs"
    verb: ClassVar[str] = "labelling"
    params_hint: ClassVar[str] = "; the student prompt's size is the job's shots"
    public_stats_help: ClassVar[str] = (
        "processed (inputs put to the teachers), answered (queries that passed the noisy "
        "threshold check and got a label), rejected, budget_exhausted, spent_mu, budget_mu, "
        "holdout_accuracy"
    )

    def plan(self, task: TaskSpec, config: Any, counts: Counts) -> PromptPateMethodPlan:
        # Whether the count is public is the data owner's word, carried by the counts: the
        # job's config records it.
        config = config.model_copy(update={"public_counts": counts.declared_public})
        n_private = counts.private if counts.declared_public else 0
        return PromptPateMethodPlan(
            task, plan_pate(task, n_private, counts.public, config), counts.public
        )

    def rebuild(self, task: TaskSpec, stored: Stored) -> PromptPateMethodPlan:
        # Planning is deterministic: this is the plan admission reserved if the row is unchanged.
        config = self.stored_config(stored)
        if config.delta is None:  # planned at the delta the row holds, whatever the default
            config = config.model_copy(update={"delta": stored.delta})
        sizes = stored.config["sizes"]
        n_private, n_public = int(sizes["private"]), int(sizes["public"])
        return PromptPateMethodPlan(task, plan_pate(task, n_private, n_public, config), n_public)

    def counts_mode(self, stored: Stored) -> CountsMode | None:
        """Declared public (the config's ``public_counts``: the plan read the count, to
        refuse a dataset that cannot fill a teacher); None otherwise, as the plan reads no
        private count (and for jobs planned before migration 0012)."""
        if (stored.config.get("pate") or {}).get("public_counts"):
            return CountsMode.DECLARED_PUBLIC
        return None

    def progress_done(self, result: SynthesisResult, total: int) -> int:
        # inputs it got to before the filter's budget ran out (at most all of them)
        return int(result.stats.get("processed", total))

    def progress_note(self, stats: Mapping[str, Any], done: int, total: int) -> str | None:
        """PromptPATE stops labelling when its planned privacy budget is spent (each public
        input pays the noisy threshold check, each answer the noisy argmax), usually before
        the last planned input: a complete run, not a stuck one."""
        if done >= total or "answered" not in stats:
            return None
        why = (
            "the planned privacy budget was spent first"
            if stats.get("budget_exhausted")
            else "no more public inputs were needed"
        )
        return (
            f"complete: {done} of {total} public inputs processed ({why}); "
            f"{int(stats['answered'])} labelled, {int(stats.get('rejected', 0))} refused by "
            "the Confident-GNMax threshold"
        )

    def stats_summary(self, stats: Mapping[str, Any]) -> str | None:
        if "answered" not in stats:
            return None
        return f"{int(stats['answered'])} queries answered"

    def report(self, result: SynthesisResult) -> str:
        stats = result.stats
        return (
            f"labelled {stats['answered']:.0f} of {stats['processed']:.0f} public inputs "
            f"({stats['rejected']:.0f} rejected); student holdout accuracy "
            f"{stats['holdout_accuracy']:.3f}"
        )
