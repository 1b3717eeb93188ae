"""PromptDPSGD (``app.promptdpsgd``): a soft prompt trained on the private records with
DP-SGD, the model frozen; the result is the soft prompt (no demonstrations).

It needs gradients and input embeddings, so it runs only on the local transformers backend
(:attr:`needs_gradients`); on any other backend the run raises
:class:`~app.promptdpsgd.backend.GradientAccessError` before it reads a record. Its plan
needs only the number of private records (the batch is drawn from all of them), read
through a charged DP release unless the data owner declared it public
(:mod:`app.promptdpsgd.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from app.llm.base import LLMBackend
from app.promptdpsgd.config import PromptDpsgdConfig
from app.promptdpsgd.plan import PromptDpsgdPlan, calibrated_plan, plan_promptdpsgd
from app.results import SynthesisResult
from app.synthesis.tasks import TaskSpec

from .base import Counts, CountsMode, Method, RunInputs, Stored, WrappedPlan
from .kinds import MethodKind
from .params import declare

# What a client may set; epsilon, delta and accounting are the job's own fields, and a seed
# never comes from a client.
PARAMETERS = declare(
    PromptDpsgdConfig,
    ("prompt_length", "steps", "batch_size", "learning_rate", "clip_norm", "init"),
)
# What a run reports that the API shows: settings and the calibrated noise (public). A run
# reports no wall time: it depends on the private records' lengths, without noise.
PUBLIC_STATS = ("steps", "prompt_length", "noise_multiplier")


@dataclass(frozen=True)
class PromptDpsgdMethodPlan(WrappedPlan):
    """PromptDPSGD's :class:`MethodPlan`: a :class:`PromptDpsgdPlan` with its task."""

    task: TaskSpec
    plan: PromptDpsgdPlan

    @property
    def progress_total(self) -> int:
        return self.plan.config.steps

    def stored(self) -> Stored:
        return Stored(
            config={
                "promptdpsgd": self.plan.config.model_dump(mode="json"),
                # planned: the released estimate or the declared-public count, what the
                # sampling divides by (never an exact private count)
                "sizes": {"planned": self.plan.n_planned},
                "count_sigma": self.plan.count_sigma,
                "count_release": self.plan.release_id or None,
            },
            schedule=[],
            delta=self.plan.delta,
        )

    def check_backend(self, backend: LLMBackend) -> None:
        # Imported here: torch and transformers load only where a job runs.
        from app.promptdpsgd.backend import local_backend

        local_backend(backend)  # GradientAccessError unless it is the local model

    def execute(self, job: RunInputs) -> SynthesisResult:
        from app.promptdpsgd.train import run_promptdpsgd

        return run_promptdpsgd(
            self.task, job.records, self.plan, job.backend, progress=job.progress
        )


class PromptDpsgd(Method):
    """PromptDPSGD (Duan et al. 2023)."""

    name = MethodKind.PROMPTDPSGD.value
    title = "PromptDPSGD"
    parameters = PARAMETERS  # no shots_param: no demonstrations, the job's shots do not apply
    config_class = PromptDpsgdConfig  # stored under its name; the job's shots do not apply
    public_stat_names = PUBLIC_STATS
    needs_gradients: ClassVar[bool] = True
    # The audit trains a soft prompt per trial: a few steps, in both profiles.
    audit_params: ClassVar[dict[str, Any]] = {"steps": 10, "batch_size": 8}
    audit_quick_params: ClassVar[dict[str, Any]] = {"steps": 10, "batch_size": 8}
    unit: ClassVar[str] = "steps"
    verb: ClassVar[str] = "training"
    params_hint: ClassVar[str] = "; it has no demonstrations, so the job's shots do not apply"
    public_stats_help: ClassVar[str] = "steps, prompt_length, noise_multiplier"

    def plan(self, task: TaskSpec, config: Any, counts: Counts) -> PromptDpsgdMethodPlan:
        # Whether the count is public is the data owner's word, carried by the counts: the
        # job's config records it (it decides the sampling and what the job releases).
        config = config.model_copy(update={"public_counts": counts.declared_public})
        release_id = counts.release.id if counts.release is not None else ""
        plan = plan_promptdpsgd(task, counts.private, config, release_id)
        return PromptDpsgdMethodPlan(task, plan)

    def rebuild(self, task: TaskSpec, stored: Stored) -> PromptDpsgdMethodPlan:
        # Calibration is deterministic given the count admission released (stored): this is
        # the plan admission reserved if the row is unchanged.
        config = self.stored_config(stored)
        sizes = stored.config["sizes"]
        # Jobs planned before migration 0012 sampled from the exact count ("private").
        n_planned = int(sizes.get("planned", sizes.get("private", 0)))
        count_sigma = stored.config.get("count_sigma")
        plan = calibrated_plan(
            config,
            n_planned,
            stored.delta,
            None if count_sigma is None else float(count_sigma),
            str(stored.config.get("count_release") or ""),
        )
        return PromptDpsgdMethodPlan(task, plan)

    def counts_mode(self, stored: Stored) -> CountsMode | None:
        """Declared public (the config's ``public_counts``), or released (the stored count
        release's noise); None for jobs planned before migration 0012."""
        if (stored.config.get("promptdpsgd") or {}).get("public_counts"):
            return CountsMode.DECLARED_PUBLIC
        if stored.config.get("count_release") or stored.config.get("count_sigma") is not None:
            return CountsMode.RELEASED
        return None

    def report(self, result: SynthesisResult) -> str:
        stats = result.stats
        sp = result.soft_prompt
        size = f"{sp.length} x {sp.hidden}" if sp is not None else "?"
        return (
            f"trained a {size} soft prompt in {stats['steps']:.0f} DP-SGD steps "
            f"(noise multiplier {stats['noise_multiplier']:.3g})"
        )
