"""Advice run bodies (a measurement on a public labelled dataset before spending)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from app.db.models import (
    AdviceStatus,
)
from app.documented import Documented
from app.eval.advice import AdviceConfig

# --- advice ----------------------------------------------------------------------


class AdviceCreate(Documented):
    """An advice run: the candidates to measure on a public labelled dataset of the tenant
    (app.eval.advice), before any budget is spent. Defaults as ``dpsyn advise``'s."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: str = Field(max_length=32)
    """A public labelled dataset."""
    methods: list[str] = Field(
        default_factory=lambda: ["adadpsyn", "tang"], min_length=1, max_length=8
    )
    shots: list[Annotated[int, Field(ge=1, le=64)]] = Field(default_factory=list, max_length=4)
    """Empty: 4 and one per label."""
    epsilons: list[Annotated[float, Field(gt=0.0, allow_inf_nan=False)]] = Field(
        default_factory=lambda: [1.0, 4.0], min_length=1, max_length=4
    )
    seeds: int = Field(3, ge=1, le=5)
    queries: int = Field(100, ge=10, le=500)
    """Held-out queries."""
    params: dict[str, Any] = Field(default_factory=dict, max_length=16)
    """Method parameters by name, as a job's params (default: the quick profile's T_max 8 and K
    50)."""

    def to_config(self) -> AdviceConfig:
        return AdviceConfig(
            methods=tuple(self.methods),
            shots=tuple(self.shots),
            epsilons=tuple(self.epsilons),
            seeds=self.seeds,
            test_size=self.queries,
            params=self.params,
        )


class AdvicePublic(Documented):
    """An advice run as stored: its request, progress in runs, and what it measured."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    dataset_id: str
    status: AdviceStatus
    progress_done: int
    progress_total: int
    estimate: str | None = None
    """While the run runs: how long the rest will take, from its runs measured so far, as
    ``dpsyn advise`` prints it ("the rest about 2–4 min (5 runs)": a range while uncertain,
    and said to be a guess until a prompt run is measured). Null before its first run ends
    and whenever the run is not running."""
    config: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    created_at: datetime
    finished_at: datetime | None

    @field_validator("estimate")
    @classmethod
    def _only_while_running(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The stored line is the last one the runner wrote: it speaks of a run in progress
        only, whatever ended or requeued the run since."""
        return value if info.data.get("status") == AdviceStatus.RUNNING else None
