"""Echo: a method for tests only, written as a plug-in method is written (docs/service.md,
"Adding a method"), in one module that imports from ``app.methods`` alone.

It says each label's name: its demonstrations are public text (the task's label names), and
its plan charges a privacy event built from primitives (a Gaussian histogram of the label
counts, a mechanism kind of its own that ``app/privacy`` has no type for), so that a job is
reserved and charged as any other. It takes one parameter with
a default (``repeat``, spelt ``--echo-repeat`` on the command line) plus the job's shots.
Importing this module defines :data:`ECHO`; registering it is the importer's choice (tests use
``registered(ECHO)``; a module named in ``DPSYN_METHOD_MODULES`` calls ``register(ECHO)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import Field

from app.methods import (
    Counts,
    Demonstration,
    GaussianEvent,
    JobConfig,
    LLMBackend,
    Method,
    MethodPlan,
    Progress,
    Record,
    Sensitivity,
    Stored,
    SynthesisResult,
    TaskSpec,
    accountant_for,
    declare,
    demonstration_prompt,
    to_dict,
)

NOISE = 7.0  # the Gaussian filter's noise multiplier: epsilon about 0.6 at delta 1e-6


class EchoConfig(JobConfig):
    """What an echo job does: ``shots`` demonstrations, each a label's name ``repeat`` times."""

    shots: int = Field(2, ge=1, le=16, description="Demonstrations to echo.")
    repeat: int = Field(2, ge=1, le=5, description="Times each label's name is said.")


@dataclass(frozen=True)
class EchoPlan(MethodPlan):
    """An echo job: its config and the number of private records it was planned for."""

    task: TaskSpec
    config: EchoConfig
    n_private: int

    @property
    def delta(self) -> float:
        return self.config.delta or 1.0 / self.n_private

    def event(self) -> GaussianEvent:
        """The charge of a Gaussian histogram of the label counts at :data:`NOISE`: L2
        sensitivity 1 under add/remove (one count moves by 1) and sqrt(2) under replace-one
        (two counts move by 1). A stand-in: no mechanism reads a record, what the job
        releases is the task's label names, public text."""
        return GaussianEvent(NOISE, sensitivity=Sensitivity(add_or_remove=1.0, replace_one=2**0.5))

    def epsilon(self) -> float:
        return accountant_for(self.config.accounting).dataset_epsilon(self.event(), self.delta)

    @property
    def progress_total(self) -> int:
        return self.config.shots

    @property
    def expected_records(self) -> int:
        return self.n_private

    def stored(self) -> Stored:
        config = {"echo": self.config.model_dump(mode="json"), "private": self.n_private}
        return Stored(config=config, schedule=[], delta=self.delta)

    def run(
        self,
        records: list[Record],
        backend: LLMBackend,
        progress: Progress | None,
        public: Sequence[str] = (),
    ) -> SynthesisResult:
        del records, public  # what it releases is public text only
        demos = []
        for i in range(self.config.shots):
            label = self.task.labels[i % len(self.task.labels)]
            demos.append(Demonstration(label, " ".join([f"echo-{label}"] * self.config.repeat)))
            if progress is not None:
                progress(i + 1, self.config.shots)
        return SynthesisResult(
            task=self.task.name,
            method="echo",
            model=backend.name,
            demonstrations=demos,
            prompt=demonstration_prompt(self.task, [(d.label, d.text) for d in demos]),
            epsilon=self.epsilon(),
            delta=self.delta,
            plan={"method": "echo"},
            event=to_dict(self.event()),
            stats={"echoed": len(demos)},
        )


class Echo(Method):
    """Says each label's name: a method for tests, registered by its importer."""

    name = "echo"
    title = "Echo (tests)"
    config_class = EchoConfig  # configure builds it; its JSON is stored under "echo"
    parameters = declare(EchoConfig, ("repeat",), flags={"repeat": "--echo-repeat"})
    shots_param = declare(EchoConfig, ("shots",))[0]
    unit = "echoes"
    verb = "echoing"
    public_stat_names = ("echoed",)
    public_stats_help = "echoed (demonstrations released)"

    def plan(self, task: TaskSpec, config: EchoConfig, counts: Counts) -> EchoPlan:
        plan = EchoPlan(task, config, counts.private)
        if plan.epsilon() > config.epsilon:
            raise ValueError(f"echo: its noise costs {plan.epsilon():.3g} > epsilon")
        return plan

    def rebuild(self, task: TaskSpec, stored: Stored) -> EchoPlan:
        return EchoPlan(task, self.stored_config(stored), int(stored.config["private"]))

    def stats_summary(self, stats: Mapping[str, object]) -> str:
        return f"{stats['echoed']} echoes"


ECHO = Echo()
