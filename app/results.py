"""The types every method and the service share: what a job produces, why it cannot run, and
how a run reports its progress.

They live here, outside any one method's package, because the token loop, PromptPATE,
PromptDPSGD, the service and the workers all use them: kept in the token loop
(``app.synthesis.generator``) they made every importer load the token loop, and made a package
cycle (synthesis -> promptdpsgd -> synthesis). This module imports nothing of the project, so
any package may import it. A soft prompt is described by the :class:`SoftPromptRelease`
protocol, which :class:`app.promptdpsgd.artifact.SoftPrompt` satisfies, so that loading the
result types does not load the soft prompt's file format (safetensors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# How a run reports progress: (units done, units planned), in the method's unit (tokens,
# public inputs, steps: ``Method.unit``). The worker writes it and raises from it to cancel a
# job, so a run must call it between units and let what it raises stop the run.
Progress = Callable[[int, int], None]


class SoftPromptRelease(Protocol):
    """What a result needs of a soft prompt: its public metadata and its stored bytes."""

    @property
    def model(self) -> str: ...

    @property
    def length(self) -> int: ...

    @property
    def hidden(self) -> int: ...

    @property
    def sha256(self) -> str: ...

    def to_bytes(self) -> bytes: ...


class SynthesisError(ValueError):
    """The job cannot run as asked (the message names the problem, never a record)."""


@dataclass(frozen=True)
class Demonstration:
    """One synthesised shot: a DP release (its label is public, its text generated)."""

    label: str
    text: str


@dataclass
class SynthesisResult:
    """What a job produces: demonstrations, the prompt built from them, and their cost."""

    task: str
    method: str
    model: str
    demonstrations: list[Demonstration]
    prompt: str
    epsilon: float
    delta: float
    plan: dict[str, object]
    event: dict[str, object]
    # Public or DP-derived only (tests/cli/test_synthesize_cli.py checks every field written).
    stats: dict[str, float | int | bool] = field(default_factory=dict)
    # PromptDPSGD's output (its demonstrations are empty); None for every other method.
    soft_prompt: SoftPromptRelease | None = None

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "task": self.task,
            "method": self.method,
            "model": self.model,
            "demonstrations": [{"label": d.label, "text": d.text} for d in self.demonstrations],
            "prompt": self.prompt,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "plan": self.plan,
            "event": self.event,
            "stats": self.stats,
        }
        if self.soft_prompt is not None:  # its metadata; the tensor is stored apart
            out["soft_prompt"] = {
                "model": self.soft_prompt.model,
                "length": self.soft_prompt.length,
                "hidden": self.soft_prompt.hidden,
                "sha256": self.soft_prompt.sha256,
            }
        return out
