"""Planning a PromptDPSGD job from public sizes alone.

The service plans a job at admission (to reserve its charge) and again in the worker (to run
it), and compares the two events: planning reads no record, draws no randomness, and gives
the same plan for the same count and config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.privacy.calibration import CalibrationError
from app.privacy.dpsgd import calibrate_dpsgd, dpsgd_epsilon, dpsgd_sampling
from app.privacy.events import DpsgdEvent
from app.privacy.sampling import Sampling
from app.promptdpsgd.config import PromptDpsgdConfig, PromptDpsgdError
from app.synthesis.tasks import TaskKind, TaskSpec

METHOD = "promptdpsgd"


@dataclass(frozen=True)
class PromptDpsgdPlan:
    """Everything about a PromptDPSGD job fixed before it reads a private record."""

    config: PromptDpsgdConfig
    n_private: int
    delta: float
    noise_multiplier: float  # sigma: noise std / clip_norm

    @property
    def sampling(self) -> Sampling:
        return dpsgd_sampling(
            self.config.accounting, n=self.n_private, batch_size=self.config.batch_size
        )

    def event(self) -> DpsgdEvent:
        return DpsgdEvent(self.noise_multiplier, self.sampling, self.config.steps)

    def epsilon(self) -> float:
        return dpsgd_epsilon(self.event(), self.config.accounting, self.delta)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-compatible data, recorded with the result (no record content)."""
        return {
            "method": METHOD,
            "config": self.config.model_dump(mode="json"),
            "n_private": self.n_private,
            "delta": self.delta,
            "noise_multiplier": self.noise_multiplier,
            "noise_std": self.noise_multiplier * self.config.clip_norm,
            "sampling_rate": self.sampling.rate,
        }


def plan_promptdpsgd(task: TaskSpec, n_private: int, config: PromptDpsgdConfig) -> PromptDpsgdPlan:
    """Validate a job and calibrate its noise multiplier to ``config.epsilon``.

    Raises :class:`PromptDpsgdError` with a message naming counts and settings only."""
    if task.kind != TaskKind.CLASSIFICATION:
        raise PromptDpsgdError(
            f"PromptDPSGD needs a classification task; task {task.name!r} is {task.kind.value}"
        )
    if n_private < 1:
        raise PromptDpsgdError("no private records: PromptDPSGD trains on them")
    if config.batch_size > n_private:
        raise PromptDpsgdError(
            f"batch_size {config.batch_size} exceeds the {n_private} private record(s)"
        )
    delta = config.delta if config.delta is not None else 1.0 / n_private
    try:
        sigma, _ = calibrate_dpsgd(
            target_epsilon=config.epsilon,
            delta=delta,
            accounting=config.accounting,
            n=n_private,
            batch_size=config.batch_size,
            steps=config.steps,
        )
    except CalibrationError as err:
        raise PromptDpsgdError(str(err)) from None
    return PromptDpsgdPlan(config=config, n_private=n_private, delta=delta, noise_multiplier=sigma)
