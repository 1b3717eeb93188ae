"""PromptDPSGD (``app.promptdpsgd``): a soft prompt trained on the private records with
DP-SGD, the model frozen; the result is the soft prompt (no demonstrations).

It needs gradients and input embeddings, so it runs only on the local transformers backend
(:attr:`needs_gradients`); on any other backend the run raises
:class:`~app.promptdpsgd.backend.GradientAccessError` before it reads a record. Its plan
needs only the number of private records (the batch is drawn from all of them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import ValidationError

from app.llm.base import LLMBackend
from app.privacy.accounting import Accounting
from app.privacy.events import DpsgdEvent
from app.promptdpsgd.config import PromptDpsgdConfig
from app.promptdpsgd.plan import PromptDpsgdPlan, plan_promptdpsgd
from app.results import Progress, SynthesisResult
from app.synthesis.data import Record
from app.synthesis.tasks import TaskSpec

from .base import (
    Counts,
    Method,
    MethodPlan,
    Stored,
    client_overrides,
    config_error,
)
from .kinds import MethodKind
from .params import declare

# What a client may set; epsilon, delta and accounting are the job's own fields, and a seed
# never comes from a client.
PARAMETERS = declare(
    PromptDpsgdConfig,
    ("prompt_length", "steps", "batch_size", "learning_rate", "clip_norm", "init"),
)
# What a run reports that the API shows: settings and the calibrated noise (public). Left
# out: ``seconds`` (timing).
PUBLIC_STATS = ("steps", "prompt_length", "noise_multiplier")


@dataclass(frozen=True)
class PromptDpsgdMethodPlan(MethodPlan):
    """PromptDPSGD's :class:`MethodPlan`: a :class:`PromptDpsgdPlan` with its task."""

    task: TaskSpec
    plan: PromptDpsgdPlan

    @property
    def delta(self) -> float:
        return self.plan.delta

    def event(self) -> DpsgdEvent:
        return self.plan.event()

    def epsilon(self) -> float:
        return self.plan.epsilon()

    @property
    def progress_total(self) -> int:
        return self.plan.config.steps

    @property
    def expected_records(self) -> int:
        return self.plan.n_private

    def stored(self) -> Stored:
        return Stored(
            config={
                "promptdpsgd": self.plan.config.model_dump(mode="json"),
                "sizes": {"private": self.plan.n_private},
            },
            schedule=[],
            delta=self.plan.delta,
        )

    def check_backend(self, backend: LLMBackend) -> None:
        # Imported here: torch and transformers load only where a job runs.
        from app.promptdpsgd.backend import local_backend

        local_backend(backend)  # GradientAccessError unless it is the local model

    def run(
        self,
        records: list[Record],
        backend: LLMBackend,
        progress: Progress | None,
        public: Sequence[str] = (),
    ) -> SynthesisResult:
        from app.promptdpsgd.train import run_promptdpsgd

        self.check_backend(backend)  # before any record is read
        return run_promptdpsgd(self.task, records, self.plan, backend, progress=progress)


class PromptDpsgd(Method):
    """PromptDPSGD (Duan et al. 2023)."""

    name = MethodKind.PROMPTDPSGD.value
    title = "PromptDPSGD"
    parameters = PARAMETERS  # no shots_param: no demonstrations, the job's shots do not apply
    needs_gradients: ClassVar[bool] = True
    unit: ClassVar[str] = "steps"
    verb: ClassVar[str] = "training"
    params_hint: ClassVar[str] = "; it has no demonstrations, so the job's shots do not apply"
    public_stats_help: ClassVar[str] = "steps, prompt_length, noise_multiplier"

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
    ) -> PromptDpsgdConfig:
        del shots  # the API always sends one; a soft prompt has no demonstrations
        try:
            return PromptDpsgdConfig(
                epsilon=epsilon,
                delta=delta,
                accounting=accounting,
                seed=seed,
                **client_overrides(params),
            )
        except (ValidationError, TypeError) as err:
            raise config_error(err) from None

    def plan(self, task: TaskSpec, config: Any, counts: Counts) -> PromptDpsgdMethodPlan:
        return PromptDpsgdMethodPlan(task, plan_promptdpsgd(task, counts.private, config))

    def rebuild(self, task: TaskSpec, stored: Stored) -> PromptDpsgdMethodPlan:
        # Planning is deterministic: this is the plan admission reserved if the row is unchanged.
        config = PromptDpsgdConfig.model_validate(stored.config["promptdpsgd"])
        n_private = int(stored.config["sizes"]["private"])
        return PromptDpsgdMethodPlan(task, plan_promptdpsgd(task, n_private, config))

    def summary(self, stored: Stored) -> tuple[str | None, int]:
        return stored.config.get("promptdpsgd", {}).get("accounting"), 0

    def public_stats(self, result: SynthesisResult) -> dict[str, Any]:
        return {k: result.stats[k] for k in PUBLIC_STATS if k in result.stats}

    def report(self, result: SynthesisResult) -> str:
        stats = result.stats
        sp = result.soft_prompt
        size = f"{sp.length} x {sp.hidden}" if sp is not None else "?"
        return (
            f"trained a {size} soft prompt in {stats['steps']:.0f} DP-SGD steps "
            f"(noise multiplier {stats['noise_multiplier']:.3g})"
        )
