"""Advice before spending: run the candidate methods on a *public* labelled set as if it were
the private data, and recommend a method, a shot count and an epsilon.

Why. A team has one privacy budget per dataset and no way to see, before spending it,
whether a DP prompt will beat asking the model with no demonstrations at all: on small
models and many labels it often does not (docs/results.md). A public set of the same task
(a benchmark, or records the team may publish) answers that at no privacy cost: the set is
public, so every run on it is free, and nothing from any budget is spent or recorded.

How. The public set is split once (a fixed public seed) into a stand-in for the private
set and held-out queries. Every candidate (method, shots, epsilon) runs as a job on the
stand-in with several seeds, each scored on the held-out queries by the evaluation's own
scorer (:mod:`app.eval.experiment`), beside zero-shot (the instruction alone) and the
majority label. The recommendation (:func:`recommend`) is the smallest epsilon at which
some candidate is ahead of both zero-shot and the majority label by more than two standard
errors of its mean (:mod:`app.eval.verdict`, the verdict validation gives too), and the best
candidate there; none if no candidate does, which is advice too: do not spend.

Limits (docs/advice.md): the stand-in's size, label balance and style may differ from the
private set's; the accuracy measured is that of the model the advice ran on; a few seeds
give a rough spread, not a guarantee.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.eval.experiment import (
    QUICK_PARAMS,
    QUICK_TASK_OVERRIDES,
    ZERO_SHOT,
    ExperimentConfig,
    Run,
    check_config,
    run_experiment,
)
from app.eval.run_estimate import BASELINE, PlannedRun, RunEstimate
from app.eval.verdict import Outcome, Verdict, verdict
from app.llm.base import LLMBackend
from app.privacy.budget import is_epsilon
from app.synthesis.config import DEFAULT_K, GENERIC_DEFAULTS, TASK_DEFAULTS
from app.synthesis.data import Record
from app.synthesis.tasks import TaskKind, TaskSpec

SPLIT_SEED = 20261203  # public: the same split of the same set every time
DEFAULT_METHODS = ("adadpsyn", "tang")


class AdviceConfig(BaseModel):
    """What an advice run tries, and how much of the public set it holds out."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    methods: tuple[str, ...] = Field(DEFAULT_METHODS, min_length=1)
    shots: tuple[int, ...] = Field((), description="Empty: 4 and one per label (if more).")
    epsilons: tuple[float, ...] = Field((1.0, 4.0), min_length=1)
    seeds: int = Field(3, ge=1, le=20)
    test_size: int = Field(100, ge=10, le=5000)
    params: dict[str, object] = Field(default_factory=dict)

    @field_validator("epsilons")
    @classmethod
    def _finite(cls, values: tuple[float, ...]) -> tuple[float, ...]:
        if bad := [v for v in values if not is_epsilon(v)]:
            raise ValueError(f"epsilons must be finite and > 0, got {bad}")
        return tuple(sorted(set(values)))

    @field_validator("shots")
    @classmethod
    def _positive(cls, values: tuple[int, ...]) -> tuple[int, ...]:
        if bad := [v for v in values if not 1 <= v <= 64]:
            raise ValueError(f"shots must be between 1 and 64, got {bad}")
        return tuple(sorted(set(values)))

    def shot_counts(self, task: TaskSpec) -> tuple[int, ...]:
        """The shots tried: as given, else 4 and one per label where that is more (up to 16),
        so that a many-label task is tried with every label shown."""
        if self.shots:
            return self.shots
        labels = len(task.labels) if task.kind == TaskKind.CLASSIFICATION else 0
        return tuple(sorted({4, min(labels, 16)} - {0, 1, 2, 3} or {4}))

    def shape(self, task: TaskSpec) -> dict[str, int]:
        """The token loop's M, T_max and K that the advice runs measure: the quick profile's
        (:data:`QUICK_PARAMS`, so that a grid runs in minutes, not an hour), the task's M,
        and whatever ``params`` sets."""
        measured = {**job_shape(task), **QUICK_PARAMS, **QUICK_TASK_OVERRIDES.get(task.name, {})}
        measured.update(self.params)
        return {name: int(measured[name]) for name in ("M", "tmax", "K")}

    def shape_note(self, task: TaskSpec) -> str | None:
        """What the advice measures that a job at its defaults would not, in words; None
        when it measures the job's own shape (advice ran T_max 8 / K 50 against a
        job's 30 / 100 and did not say so)."""
        measured, job = self.shape(task), job_shape(task)
        changed = [name for name in measured if measured[name] != job[name]]
        if not changed or not any(m in TOKEN_LOOP for m in self.methods):
            return None
        text = ", ".join(f"{_NAMES[n]} {measured[n]}" for n in changed)
        theirs = ", ".join(f"{_NAMES[n]} {job[n]}" for n in changed)
        flags = " ".join(f"--param {n}={job[n]}" for n in changed)
        return (
            f"Measured at {text} (the quick profile, so that the grid runs in minutes); a job on "
            f"{task.name} runs at {theirs} by default and may score differently. {flags} "
            "measures the job's own shape (several times longer)."
        )

    def experiment(self, task: TaskSpec, shots: int) -> ExperimentConfig:
        """The evaluation grid of one shot count: every method at every epsilon, no
        synthesis baselines (zero-shot is part of every grid)."""
        return ExperimentConfig(
            seeds=tuple(range(self.seeds)),
            test_size=None,
            epsilons=self.epsilons,
            methods=self.methods,
            shots=shots,
            params={**QUICK_PARAMS, **QUICK_TASK_OVERRIDES.get(task.name, {}), **self.params},
            calibrated=True,  # both numbers reported: /complete answers either way
            baselines=False,
        )


#: The methods whose runs are the token loop (the shape note and the estimate read M, T_max).
TOKEN_LOOP = ("adadpsyn", "tang")
_NAMES = {"M": "M", "tmax": "T_max", "K": "K"}


def job_shape(task: TaskSpec) -> dict[str, int]:
    """A job's M, T_max and K on ``task`` when it names none (app.synthesis.config)."""
    defaults = TASK_DEFAULTS.get(task.name, GENERIC_DEFAULTS)
    return {"M": defaults["M"], "tmax": defaults["tmax"], "K": DEFAULT_K}


#: A priori, before any prompt run is measured: a token-loop run of 4 shots x T_max 8 x M 10
#: costs this many zero-shot runs (:data:`app.eval.run_estimate.PRIOR_SPREAD` either way, 2 to
#: 16: measured 4-10 on a 4-label custom task and 5-15 on AG News with the packaged Gemma on two
#: cores), in proportion to its teacher steps. A guess, said so, and replaced by the first
#: prompt run's measured time.
RUN_PER_ZERO_SHOT = 5.6
REFERENCE_STEPS = 4 * 8 * 10


def planned_runs(task: TaskSpec, config: AdviceConfig) -> list[PlannedRun]:
    """Every run of the advice in the order it runs (the grid's: methods, then ε, then seeds),
    each with its profile (:func:`_profile`) and its a-priori size in zero-shot runs, for
    :class:`~app.eval.run_estimate.RunEstimate`."""
    shape = config.shape(task)
    planned: list[PlannedRun] = []
    for shots in config.shot_counts(task):
        planned.append(PlannedRun(BASELINE, 1.0))  # each shot count's grid scores it again
        for method in config.methods:
            steps = shots * shape["tmax"] * shape["M"] if method in TOKEN_LOOP else 0
            size = RUN_PER_ZERO_SHOT * (steps / REFERENCE_STEPS if steps else 1.0)
            for epsilon in config.epsilons:
                planned += [PlannedRun(_profile(method, shots, epsilon), size)] * config.seeds
    return planned


def _profile(method: str | None, shots: int, epsilon: float) -> str:
    """Runs that do the same work: one method, shot count and ε (its planner sizes a job by
    ε); the seed aside."""
    return BASELINE if method is None else f"{method}/{shots}@{epsilon:g}"


@dataclass(frozen=True)
class Candidate:
    """One (method, shots, epsilon) with its accuracies over seeds, each on ``n_queries``
    held-out queries (0: not known)."""

    method: str
    shots: int
    epsilon: float
    accuracies: tuple[float, ...]
    n_queries: int = 0
    # the same runs' accuracies with contextual calibration (classification), as /complete
    # answers with calibrated=true; empty where not measured
    calibrated: tuple[float, ...] = ()

    @property
    def mean(self) -> float:
        return float(np.mean(self.accuracies))

    @property
    def se(self) -> float:
        """Standard error of the mean accuracy: the spread over seeds, and the sampling of
        the queries (binomial: every seed scores the same queries, so their spread does not
        show it). With one seed the spread is not measured, and :meth:`beats` says so."""
        n = len(self.accuracies)
        seeds = float(np.var(self.accuracies, ddof=1) / n) if n > 1 else 0.0
        p = self.mean
        queries = p * (1.0 - p) / self.n_queries if self.n_queries else 0.0
        return math.sqrt(seeds + queries)

    def against(self, accuracy: float) -> Verdict:
        """Ahead of, behind, or cannot tell from ``accuracy`` at two standard errors
        (:func:`app.eval.verdict.verdict`, as a prompt's validation says it), over two seeds at
        least: one seed measures no spread, so it cannot tell (one seed once "beat" the
        majority label it only tied, with "± 0.0 %")."""
        return verdict(self.mean, accuracy, self.se if len(self.accuracies) >= 2 else None)

    def beats(self, accuracy: float) -> bool:
        """Ahead of ``accuracy`` (:meth:`against`)."""
        return self.against(accuracy).outcome is Outcome.AHEAD

    def to_tell(self, accuracy: float) -> tuple[int, int] | None:
        """(queries, seeds) at which this candidate's lead over ``accuracy``, if it held,
        would be two standard errors: both scaled by the factor (2 SE / lead)^2 that shrinks
        the SE enough (each part of the variance falls as its count grows). None when it is
        not ahead (more data would not make it a win) or nothing was measured."""
        factor = verdict(self.mean, accuracy, self.se).factor()
        if self.mean <= accuracy or not self.n_queries or factor is None:
            return None
        seeds = max(2, len(self.accuracies))
        factor = max(1.0, factor)
        return math.ceil(self.n_queries * factor), math.ceil(seeds * factor)


@dataclass(frozen=True)
class Advice:
    """What an advice run measured and recommends."""

    task: str
    n_standin: int
    n_queries: int
    zero_shot: float
    majority: float | None
    candidates: tuple[Candidate, ...]
    recommended: Candidate | None
    runs: list[Run] = field(default_factory=list, repr=False)
    shape_note: str | None = None  # AdviceConfig.shape_note: what differs from a job
    zero_shot_calibrated: float | None = None

    @property
    def bar(self) -> float:
        """The better baseline: a candidate must beat zero-shot and the majority label."""
        return max(self.zero_shot, self.majority or 0.0)

    def summary(self) -> str:
        """One plain sentence a user can act on, and what the measurement left out."""
        return " ".join(part for part in (self._verdict(), self.shape_note) if part)

    def _why_not(self, best: Candidate) -> str:
        """Why the best candidate is no recommendation, and what measurement would tell."""
        seeds = len(best.accuracies)
        if seeds < 2:
            return "one seed cannot tell a prompt from noise; ask for more seeds"
        bar = self.bar
        judged = best.against(bar)
        size = f"{judged.lead:+.1%} against a margin of ±{judged.margin:.1%}"
        if judged.outcome is Outcome.BEHIND:
            return (
                f"it is behind the better baseline ({bar:.1%}) by more than two standard "
                f"errors ({size}): more data would not make it a win"
            )
        needed = best.to_tell(bar)
        if needed is None:
            return (
                f"{self.n_queries} queries and {seeds} seeds cannot tell it from the better "
                f"baseline ({bar:.1%}; {size}), and it measured no lead over it for more data "
                "to confirm"
            )
        queries, more_seeds = needed
        return (
            f"{self.n_queries} queries and {seeds} seeds cannot tell it apart from them; a lead "
            f"of {best.mean - bar:+.1%} would take about {queries} queries and {more_seeds} "
            "seeds to tell (--seeds, and a larger public set)"
        )

    def _verdict(self) -> str:
        baselines = f"zero-shot {self.zero_shot:.1%}" + (
            f", the majority label {self.majority:.1%}" if self.majority is not None else ""
        )
        if self.recommended is None:
            best = max(self.candidates, key=lambda c: c.mean)
            return (
                f"No candidate clearly beats the baselines ({baselines}) on this public set: "
                f"the best, {best.method} with {best.shots} shots at ε {best.epsilon:g}, scored "
                f"{best.mean:.1%} ± {best.se:.1%}, and {self._why_not(best)}. Spending budget "
                "here is not advised; zero-shot costs nothing."
            )
        r = self.recommended
        return (
            f"Recommended: {r.method} with {r.shots} shots at ε {r.epsilon:g} "
            f"({r.mean:.1%} ± {r.se:.1%} against {baselines}): the smallest ε tried at which "
            "a candidate beats both by more than two standard errors (over seeds and queries)."
        )

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form (public values only: accuracies on a public set)."""
        return {
            "task": self.task,
            "n_standin": self.n_standin,
            "n_queries": self.n_queries,
            "zero_shot": self.zero_shot,
            "zero_shot_calibrated": self.zero_shot_calibrated,
            "majority": self.majority,
            "candidates": [_candidate_dict(c, self.bar) for c in self.candidates],
            "recommended": (
                None if self.recommended is None else _candidate_dict(self.recommended, self.bar)
            ),
            "shape_note": self.shape_note,
            "summary": self.summary(),
        }


def _candidate_dict(c: Candidate, bar: float) -> dict[str, object]:
    """``verdict``: :meth:`Candidate.against` the better baseline, as the recommendation
    judges it (ahead, behind, cannot_tell)."""
    return {
        "method": c.method,
        "shots": c.shots,
        "epsilon": c.epsilon,
        "mean": c.mean,
        "se": c.se,
        "accuracies": list(c.accuracies),
        "calibrated_mean": float(np.mean(c.calibrated)) if c.calibrated else None,
        "calibrated_accuracies": list(c.calibrated),
        "verdict": c.against(bar).outcome.value,
    }


def split(records: Sequence[Record], test_size: int) -> tuple[list[Record], list[Record]]:
    """(stand-in for the private set, held-out queries): a fixed public shuffle, at most a
    quarter of the set held out, so the stand-in keeps most of the records."""
    if len(records) < 8:
        raise ValueError(f"the public set has {len(records)} records; advice needs at least 8")
    order = np.random.default_rng(SPLIT_SEED).permutation(len(records))
    held = min(test_size, len(records) // 4)
    queries = [records[i] for i in sorted(order[:held])]
    standin = [records[i] for i in sorted(order[held:])]
    return standin, queries


def recommend(
    candidates: Sequence[Candidate], zero_shot: float, majority: float | None = None
) -> Candidate | None:
    """The smallest epsilon at which a candidate beats both zero-shot and the majority label
    (:meth:`Candidate.beats`), and the candidate with the best mean there (ties: fewer
    shots, then the first method); None when none does: then nothing is recommended."""
    bar = max(zero_shot, majority if majority is not None else 0.0)
    for epsilon in sorted({c.epsilon for c in candidates}):
        winners = [c for c in candidates if c.epsilon == epsilon and c.beats(bar)]
        if winners:
            return max(winners, key=lambda c: (c.mean, -c.shots))
    return None


def _majority(task: TaskSpec, queries: Sequence[Record]) -> float | None:
    if task.kind != TaskKind.CLASSIFICATION or not queries:
        return None
    return max(Counter(r.label for r in queries).values()) / len(queries)


def check(task: TaskSpec, config: AdviceConfig) -> None:
    """Refuse, before any model loads, a method that is unknown or refuses its parameters."""
    for shots in config.shot_counts(task):
        check_config(task, config.experiment(task, shots))


def advise(
    task: TaskSpec,
    records: Sequence[Record],
    backend: LLMBackend,
    config: AdviceConfig,
    public: Sequence[str] | None = None,
    log: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    estimate: Callable[[str | None], None] | None = None,
) -> Advice:
    """Run every candidate on the public ``records`` and recommend (see the module).
    ``progress(done, total)`` counts runs over every shot count; ``estimate(line)`` gets the
    time the rest will take (:mod:`app.eval.run_estimate`) each time it changes, None once no
    run is left (the service stores it for the run's page, as the CLI logs it)."""
    standin, queries = split(records, config.test_size)
    runs: list[Run] = []
    counts = config.shot_counts(task)
    per_grid = 1 + len(config.methods) * len(config.epsilons) * config.seeds
    if log is not None:
        log(plan_line(task, config, len(counts) * per_grid))

    clock = RunEstimate(planned_runs(task, config))
    said: list[str | None] = [""]

    def tell() -> None:
        """After a run has ended and been logged: the rest, when what it says has changed."""
        line = clock.line()
        if line == said[0]:
            return
        said[0] = line
        if log is not None and line is not None:
            log(line)
        if estimate is not None:
            estimate(line)

    for index, shots in enumerate(counts):

        def report(done: int, _total: int, offset: int = index * per_grid) -> None:
            if progress is not None:
                progress(offset + done, per_grid * len(counts))
            if done:
                tell()

        def ended(run: Run, shots: int = shots) -> None:
            clock.finished(_profile(run.method, shots, run.epsilon_target), run.seconds)

        grid = config.experiment(task, shots)
        ran = run_experiment(
            task, standin, queries, backend, grid, log, public, report, on_run=ended
        )
        for run in ran:
            if run.kind != ZERO_SHOT or not any(r.kind == ZERO_SHOT for r in runs):
                runs.append(_with_shots(run, shots))
    zero_run = next(r for r in runs if r.kind == ZERO_SHOT)
    zero = zero_run.accuracy
    candidates = _candidates(runs, len(queries))
    majority = _majority(task, queries)
    return Advice(
        task=task.name,
        n_standin=len(standin),
        n_queries=len(queries),
        zero_shot=zero,
        majority=majority,
        candidates=candidates,
        recommended=recommend(candidates, zero, majority),
        runs=runs,
        shape_note=config.shape_note(task),
        zero_shot_calibrated=zero_run.calibrated_accuracy,
    )


def plan_line(task: TaskSpec, config: AdviceConfig, total: int) -> str:
    """What the advice will run, before it runs: the grid and the shape it measures."""
    shape = config.shape(task)
    grid = (
        f"{len(config.methods)} method(s) x {len(config.epsilons)} ε x {config.seeds} seed(s) "
        f"x {len(config.shot_counts(task))} shot count(s)"
    )
    return (
        f"advice: {total} runs ({grid}, and zero-shot), M {shape['M']}, T_max {shape['tmax']}, "
        f"K {shape['K']}; an estimate of the time follows each run"
    )


def _with_shots(run: Run, shots: int) -> Run:
    """The run, its setting key naming the shots (one grid per shot count)."""
    if run.kind == ZERO_SHOT:
        return run
    return Run(**{**run.__dict__, "setting": f"{run.setting}/{shots}"})


def _candidates(runs: Sequence[Run], n_queries: int) -> tuple[Candidate, ...]:
    grouped: dict[tuple[str, int, float], list[Run]] = {}
    for run in runs:
        if run.kind == ZERO_SHOT:
            continue
        shots = int(run.setting.rsplit("/", 1)[1])
        grouped.setdefault((run.kind, shots, run.epsilon_target), []).append(run)
    return tuple(
        Candidate(
            method,
            shots,
            epsilon,
            tuple(r.accuracy for r in group),
            n_queries,
            tuple(r.calibrated_accuracy for r in group if r.calibrated_accuracy is not None),
        )
        for (method, shots, epsilon), group in grouped.items()
    )
