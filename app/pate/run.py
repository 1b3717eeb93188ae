"""Running a PromptPATE job (Duan et al. 2023) end to end.

1. **Teachers.** The private records are split into ``teachers`` disjoint few-shot prompts by
   a secret keyed hash (:mod:`app.pate.teachers`).
2. **Labelling.** Public inputs, shuffled, cleaned of HTML markup (``<br />``,
   :func:`app.pate.public.clean_public_text`) and cut to ``max_chars``, go to the teachers in
   groups; each group's vote histograms are computed (nothing is released), then each input
   in turn passes through a Gaussian DP filter and Confident-GNMax: stop when the filter
   cannot afford a whole query (check and release, the worst case), spend the threshold
   check, and if the noisy maximum clears the threshold spend the GNMax release and keep the
   input with its noisy label. The job is charged the filter's budget (``PatePlan.event``).
3. **Student.** Random prompts of labelled public examples are scored on a holdout of the
   noisy labels (:mod:`app.pate.student`); the best one is the result.

The result holds public inputs with DP labels only. No private text is logged, put into an
error message or returned; the private records reach the backend inside teacher prompts only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.llm.base import LLMBackend
from app.pate.config import PateError
from app.pate.plan import PatePlan, public_count
from app.pate.public import clean_public_text, cut
from app.pate.student import select_student
from app.pate.teachers import draw_key, teacher_prompts, teacher_votes
from app.privacy.events import to_dict
from app.privacy.pate import GdpFilter
from app.privacy.rng import make_rng
from app.results import Demonstration, Progress, SynthesisResult
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.tasks import TaskSpec

METHOD = "promptpate"


def run_pate(
    task: TaskSpec,
    private: Sequence[Record],
    public: Sequence[str],
    plan: PatePlan,
    backend: LLMBackend,
    *,
    rng: np.random.Generator | None = None,
    progress: Progress | None = None,
) -> SynthesisResult:
    """Label public inputs with the private teachers and return the best student prompt.

    ``plan`` must come from :func:`app.pate.plan.plan_pate` with these sizes. ``rng`` is the
    job's noise generator (default: OS-seeded, or ``config.seed`` for tests). ``progress`` is
    called after every group of public inputs and, while the teachers vote on a group, as
    their calls come in (inputs' worth of votes, :func:`_within_group`); an exception it
    raises (a cancellation) stops the job there and propagates.
    """
    config = plan.config
    if public_count(len(public), config) != plan.n_public:
        raise PateError("the public data changed since the job was planned")
    if rng is None:
        rng = make_rng(config.seed)

    # The key lives only in this frame: it is never stored, logged or returned.
    prompts = teacher_prompts(task, private, config.teachers, config.shots, draw_key(rng))
    order = rng.permutation(len(public))[: plan.n_public]
    inputs = [cut(clean_public_text(public[i]), config.max_chars) for i in order]

    answers = _label_public(task, prompts, inputs, plan, backend, rng, progress)
    labelled = answers.labelled
    student = select_student(
        task,
        labelled,
        backend,
        shots=config.student_shots,
        candidates=config.candidates,
        holdout_fraction=config.holdout_fraction,
        rng=rng,
    )
    demos = list(student.demonstrations)
    return SynthesisResult(
        task=task.name,
        method=METHOD,
        model=backend.name,
        demonstrations=demos,
        prompt=demonstration_prompt(task, [(d.label, d.text) for d in demos]),
        epsilon=plan.epsilon(),
        delta=plan.delta,
        plan=plan.to_dict(),
        event=to_dict(plan.event()),
        stats={
            "processed": answers.processed,
            "answered": len(labelled),
            "rejected": answers.rejected,
            "budget_exhausted": answers.exhausted,
            "teachers": config.teachers,
            "spent_mu": answers.gdp.spent_mu,
            "budget_mu": answers.gdp.budget_mu,
            "pool": student.pool,
            "holdout": student.holdout,
            "candidates": student.candidates,
            "holdout_accuracy": student.holdout_accuracy,
        },
    )


@dataclass
class _Answers:
    """What the teachers' noisy vote released: the labelled public inputs, how many inputs
    were processed and rejected, whether the budget ran out first, and its filter."""

    labelled: list[Demonstration]
    processed: int
    rejected: int
    exhausted: bool
    gdp: GdpFilter


def _within_group(
    progress: Progress | None, start: int, size: int, teachers: int, total: int
) -> Callable[[int], None] | None:
    """Progress while the teachers vote on a group (``size`` inputs from ``start``): after
    ``n`` of the ``teachers`` calls, ``start + size * n // teachers`` inputs' worth of votes are
    in. With many teachers a group takes minutes, and a job reporting only whole groups would
    show 0 for all of its first one. The count is reported each time it moves (past the
    group's start) and never reaches the group's end: the report after the group is the number of
    inputs the filter processed (fewer, when the privacy budget ran out inside the group)."""
    if progress is None or teachers <= 1:
        return None

    last = start

    def voted(n: int) -> None:
        nonlocal last
        if n < teachers and (done := start + size * n // teachers) > last:
            last = done
            progress(done, total)

    return voted


def _label_public(
    task: TaskSpec,
    prompts: Sequence[str],
    inputs: Sequence[str],
    plan: PatePlan,
    backend: LLMBackend,
    rng: np.random.Generator,
    progress: Progress | None,
) -> _Answers:
    """Confident-GNMax over the public inputs, group by group, until the inputs or the
    planned budget (a GDP filter: every input pays the threshold check, every answer its
    noisy argmax) run out."""
    agg = plan.privacy.aggregator
    gdp = GdpFilter(plan.privacy.budget_mu)
    answers = _Answers([], 0, 0, False, gdp)
    for start in range(0, len(inputs), plan.config.group_size):
        if not gdp.affords(agg.mu_threshold, agg.mu_gnmax):
            answers.exhausted = True
            break
        group = inputs[start : start + plan.config.group_size]
        voted = _within_group(progress, start, len(group), len(prompts), plan.n_public)
        votes = teacher_votes(backend, task, prompts, group, voted)
        for text, counts in zip(group, votes, strict=True):
            if not gdp.affords(agg.mu_threshold, agg.mu_gnmax):
                answers.exhausted = True
                break
            gdp.spend(agg.mu_threshold)
            answers.processed += 1
            if agg.passes(counts, rng):
                gdp.spend(agg.mu_gnmax)
                answers.labelled.append(Demonstration(task.labels[agg.label(counts, rng)], text))
            else:
                answers.rejected += 1
        if progress is not None:
            progress(answers.processed, plan.n_public)
        if answers.exhausted:
            break
    return answers
