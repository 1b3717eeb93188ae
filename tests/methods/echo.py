"""Echo: a method for tests only, written as a plug-in method is written (docs/service.md,
"Adding a method"), in one module that imports from ``app.methods`` alone.

It says each label's name: its demonstrations are public text (the task's label names), and
its plan charges a privacy event built from primitives (a Gaussian histogram of the label
counts, a mechanism kind of its own that ``app/privacy`` has no type for), so that a job is
reserved and charged as any other. It takes one parameter with
a default (``repeat``, spelt ``--echo-repeat`` on the command line) plus the job's shots.

Its plan reads the dataset's label counts as a plug-in may (issue 41): through
:class:`~app.methods.Counts` only (``labels``, ``private``), which holds the dataset's one
count release or the counts its owner declared public, never an exact private count; it
stores the planned counts and which kind they were, and its delta is the config's (the
public default, never 1/|D|).
Importing this module defines :data:`ECHO`; registering it is the importer's choice (tests use
``registered(ECHO)``; a module named in ``DPSYN_METHOD_MODULES`` calls ``register(ECHO)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from pydantic import Field

from app.methods import (
    Counts,
    CountsMode,
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
    gaussian_release,
    make_rng,
    to_dict,
)

NOISE = 7.0  # the Gaussian filter's noise multiplier: epsilon about 0.6 at delta 1e-6


class EchoConfig(JobConfig):
    """What an echo job does: ``shots`` demonstrations, each a label's name ``repeat`` times."""

    shots: int = Field(2, ge=1, le=16)
    """Demonstrations to echo."""
    repeat: int = Field(2, ge=1, le=5)
    """Times each label's name is said."""


@dataclass(frozen=True)
class EchoPlan(MethodPlan):
    """An echo job: its config and the label counts it was planned with (each label's
    released estimate, or the count declared public: what ``Counts.labels`` gave its plan)."""

    task: TaskSpec
    config: EchoConfig
    planned: Mapping[str, int]
    counts: CountsMode | None = None  # how the planned counts were known (None: not given)
    release_id: str = ""  # the dataset's count release they come from ("": none)

    @property
    def delta(self) -> float:
        return self.config.delta  # public: JobConfig's default unless the job sets one

    def event(self) -> GaussianEvent:
        """The charge of a Gaussian histogram of the label counts at :data:`NOISE`: L2
        sensitivity 1 under add/remove (one count moves by 1) and sqrt(2) under replace-one
        (two counts move by 1). The run draws it and releases nothing of it: what the job
        says is the task's label names, public text."""
        return GaussianEvent(NOISE, sensitivity=Sensitivity(add_or_remove=1.0, replace_one=2**0.5))

    def epsilon(self) -> float:
        return _priced(self.event(), self.config.accounting, self.delta)

    @property
    def progress_total(self) -> int:
        return self.config.shots

    def stored(self) -> Stored:
        config = {
            "echo": self.config.model_dump(mode="json"),
            "planned": {str(k): int(v) for k, v in self.planned.items()},  # released or public
            "counts": None if self.counts is None else self.counts.value,
            # the job record names the release its counts came from (the API shows it)
            "count_release": self.release_id or None,
        }
        return Stored(config=config, schedule=[], delta=self.delta)

    def run(
        self,
        records: list[Record],
        backend: LLMBackend,
        progress: Progress | None,
        public: Sequence[str] = (),
    ) -> SynthesisResult:
        del public
        # The release its event charges: the label counts with Gaussian noise, drawn through
        # the project's mechanism function (which records it). Echo then says public text
        # only, so the noisy counts go no further.
        counts = np.array([sum(r.label == label for r in records) for label in self.task.labels])
        gaussian_release(counts, self.event(), make_rng(self.config.seed))
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


@cache
def _priced(event: GaussianEvent, accounting: str, delta: float) -> float:
    """What ``event`` costs at ``delta``: the accountant's price, a function of these three
    alone, kept since the method contract plans and runs echo thousands of times."""
    return accountant_for(accounting).dataset_epsilon(event, delta)


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
        # The counts are released (the dataset's one release, charged on its ledger) or
        # declared public: a plug-in can read no other. It refuses on them, as a plan may.
        mode = CountsMode.DECLARED_PUBLIC if counts.declared_public else CountsMode.RELEASED
        if counts.private < 1:
            raise ValueError("echo: the dataset holds no records to echo the labels of")
        release = counts.release.id if counts.release is not None else ""
        plan = EchoPlan(task, config, dict(counts.labels), mode, release)
        if plan.epsilon() > config.epsilon:
            raise ValueError(f"echo: its noise costs {plan.epsilon():.3g} > epsilon")
        return plan

    def rebuild(self, task: TaskSpec, stored: Stored) -> EchoPlan:
        mode = stored.config.get("counts")
        return EchoPlan(
            task,
            self.stored_config(stored),
            {str(k): int(v) for k, v in stored.config["planned"].items()},
            None if mode is None else CountsMode(mode),
            str(stored.config.get("count_release") or ""),
        )

    def counts_mode(self, stored: Stored) -> CountsMode | None:
        mode = stored.config.get("counts")
        return None if mode is None else CountsMode(mode)

    def stats_summary(self, stats: Mapping[str, object]) -> str:
        return f"{stats['echoed']} echoes"


ECHO = Echo()
