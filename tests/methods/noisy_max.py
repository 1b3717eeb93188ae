"""Noisy majority: a pure-DP test method, written as a plug-in is, with its bugs to plant.

Each of its ``shots`` demonstrations names one label, picked by report-noisy-max over the
private records' label counts (:func:`app.methods.report_noisy_max`), and says a public
template sentence for it. Its event is ``shots`` pure-DP releases, each at ``epsilon /
shots`` per unit of sensitivity; the counts move by 1 in L1 under add/remove and by 2 under
replace-one (a record relabelled leaves one count and joins another), so a release is
``epsilon / shots``-DP under the first and twice that under the second, and the plan sizes
the unit so the job's target holds under the relation its accounting uses.

:data:`FLAWS` are the bugs issue 52's reviewer planted in a method like this one, one at a
time; ``NoisyMajority(flaw)`` carries one. Each must fail the method contract
(tests/methods/test_contract_outputs.py); the honest method passes it.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from pydantic import Field

from app.methods import (
    Accounting,
    Counts,
    Demonstration,
    JobConfig,
    LLMBackend,
    Method,
    MethodPlan,
    Progress,
    PureDpEvent,
    Record,
    Sensitivity,
    Stored,
    SynthesisResult,
    TaskSpec,
    accountant_for,
    declare,
    demonstration_prompt,
    make_rng,
    report_noisy_max,
    to_dict,
)

#: What one record moves the label counts by, in L1: the release's sensitivity.
COUNTS = Sensitivity(add_or_remove=1.0, replace_one=2.0)

FLAWS = (
    "one_event_many_releases",  # the event says 1 release, the run makes `shots` at the target
    "replace_one_sensitivity",  # replace-one sensitivity stated 1 instead of 2
    "count_in_text",  # a label's exact count appended to each demonstration's text
    "record_as_demo",  # a private record copied verbatim as each demonstration
    "record_in_data_check",  # record text in the error of a data check (longer than 40 chars)
    "unseeded_shuffle",  # random.shuffle(demos), from Python's global generator
    "unseeded_noise",  # np.random.default_rng() for the noise
)


class NoisyMajorityConfig(JobConfig):
    """``shots`` demonstrations, each naming a label picked by report-noisy-max."""

    shots: int = Field(4, ge=1, le=16)
    """Demonstrations to release."""


@cache
def _priced(event: PureDpEvent, accounting: str, delta: float) -> float:
    """What ``event`` costs at ``delta``: the accountant's price, a function of these three
    alone, kept since the method contract plans and runs the method thousands of times."""
    return accountant_for(accounting).dataset_epsilon(event, delta)


@dataclass(frozen=True)
class NoisyMajorityPlan(MethodPlan):
    task: TaskSpec
    config: NoisyMajorityConfig
    flaw: str = ""
    factor: float = 1.0  # each release runs at this many times what its event says

    @property
    def delta(self) -> float:
        return self.config.delta

    @property
    def sensitivity(self) -> Sensitivity:
        if self.flaw == "replace_one_sensitivity":
            return Sensitivity(add_or_remove=1.0, replace_one=1.0)
        return COUNTS

    @property
    def unit(self) -> float:
        """Each release's epsilon per unit of sensitivity: the target split over the shots,
        over the sensitivity under the accounting's relation."""
        paper = self.config.accounting is Accounting.PAPER
        stated = self.sensitivity.replace_one if paper else self.sensitivity.add_or_remove
        assert stated is not None
        if self.flaw == "one_event_many_releases":
            return self.config.epsilon / stated
        return self.config.epsilon / self.config.shots / stated

    def event(self) -> PureDpEvent:
        """``shots`` report-noisy-max releases of the label counts (L1 sensitivity 1 under
        add/remove, 2 under replace-one), each ``unit``-DP per unit."""
        count = 1 if self.flaw == "one_event_many_releases" else self.config.shots
        return PureDpEvent(self.unit, count=count, sensitivity=self.sensitivity)

    def epsilon(self) -> float:
        return _priced(self.event(), self.config.accounting, self.delta)

    @property
    def progress_total(self) -> int:
        return self.config.shots

    def stored(self) -> Stored:
        return Stored({"noisy_majority": self.config.model_dump(mode="json")}, [], self.delta)

    def run(
        self,
        records: list[Record],
        backend: LLMBackend,
        progress: Progress | None,
        public: Sequence[str] = (),
    ) -> SynthesisResult:
        del public
        if self.flaw == "record_in_data_check":
            for record in records:
                if len(record.text) > 40:
                    raise ValueError(f"record too long for a template: {record.text!r}")
        counts = Counter(r.label for r in records)
        scores = np.array([counts[label] for label in self.task.labels], dtype=float)
        rng = (
            np.random.default_rng() if self.flaw == "unseeded_noise" else make_rng(self.config.seed)
        )
        release = PureDpEvent(self.unit * self.factor, sensitivity=self.sensitivity)
        demos = []
        for i in range(self.config.shots):
            label = self.task.labels[report_noisy_max(scores, release, rng)]
            demos.append(Demonstration(label, self._text(label, records, counts)))
            if progress is not None:
                progress(i + 1, self.config.shots)
        if self.flaw == "unseeded_shuffle":
            random.shuffle(demos)
        return SynthesisResult(
            task=self.task.name,
            method="noisy_majority",
            model=backend.name,
            demonstrations=demos,
            prompt=demonstration_prompt(self.task, [(d.label, d.text) for d in demos]),
            epsilon=self.epsilon(),
            delta=self.delta,
            plan={"method": "noisy_majority"},
            event=to_dict(self.event()),
            stats={"demonstrations": len(demos)},
        )

    def _text(self, label: str, records: list[Record], counts: Counter[str]) -> str:
        text = f"a typical example of {label}"
        if self.flaw == "count_in_text":
            return f"{text} ({counts[label]} of them)"
        if self.flaw == "record_as_demo":
            return next(r.text for r in records if r.label == label)
        return text


class NoisyMajority(Method):
    """Demonstrations that name labels picked by report-noisy-max (tests only)."""

    name = "noisy_majority"
    title = "Noisy majority (tests)"
    config_class = NoisyMajorityConfig
    stored_key = "noisy_majority"
    shots_param = declare(NoisyMajorityConfig, ("shots",))[0]
    reads_counts = False
    unit = "demonstrations"
    verb = "picking"
    public_stat_names = ("demonstrations",)

    def __init__(self, flaw: str = "", factor: float = 1.0) -> None:
        """``flaw``: one of :data:`FLAWS` planted ("": none); ``factor``: every release
        runs at that many times the epsilon its event states (under-priced by it; the
        audit's power is measured on it, bench/contract_audit.py)."""
        if flaw and flaw not in FLAWS:
            raise ValueError(f"no such flaw: {flaw}")
        self.flaw, self.factor = flaw, factor

    def plan(self, task: TaskSpec, config: NoisyMajorityConfig, counts: Counts) -> MethodPlan:
        del counts
        return NoisyMajorityPlan(task, config, self.flaw, self.factor)

    def rebuild(self, task: TaskSpec, stored: Stored) -> MethodPlan:
        return NoisyMajorityPlan(task, self.stored_config(stored), self.flaw, self.factor)


NOISY_MAJORITY = NoisyMajority()
