"""The token loop shared by AdaDPSyn and DP few-shot generation (Algorithms 1-3).

For every token, each unfinished demonstration draws a fresh subsample of its label's records
(with the sampling of the job's privacy, so the accountant's assumption holds by construction),
splits it into M teacher prompts, and all teacher prompts of all demonstrations go to the
backend in one batch. The M distributions of each demonstration are aggregated privately; the
argmax token is appended. A demonstration stops at a newline, end-of-sequence, or T_max tokens.

The methods differ only in the aggregation function. Nothing here logs or returns private
text: the only outputs are generated tokens, which are DP releases.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.llm.base import LLMBackend, kv_scope
from app.privacy.accounting import Accounting
from app.privacy.adadpsyn import adadpsyn_aggregate
from app.privacy.calibration import calibrate_noise
from app.privacy.events import SynthesisEvent, to_dict
from app.privacy.geometry import as_distributions
from app.privacy.params import (
    AdaDPSynParams,
    AdaDPSynVariant,
    Aggregator,
    TangParams,
    adadpsyn_defaults,
)
from app.privacy.planner import PlannerShape, plan_adadpsyn
from app.privacy.rng import make_rng
from app.privacy.sampling import Sampling
from app.privacy.synthesis import SynthesisPrivacy, label_schedule, shots_per_label
from app.privacy.tang import AggregationResult, gaussian_aggregate
from app.privacy.unit import DEFAULT_DELTA, count_noise_multiplier, release_counts
from app.results import Demonstration, Progress, SynthesisError, SynthesisResult
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt, public_prompt, teacher_prompt
from app.synthesis.tasks import TaskKind, TaskSpec

ALL_RECORDS = "*"  # the single partition of an extraction task


def _partitions(task: TaskSpec, records: Sequence[Record]) -> dict[str, list[Record]]:
    if task.kind == TaskKind.EXTRACTION:
        return {ALL_RECORDS: list(records)}
    parts: dict[str, list[Record]] = {label: [] for label in task.labels}
    for record in records:
        parts[record.label].append(record)
    return parts


def _base_privacy(config: SynthesisConfig) -> SynthesisPrivacy:
    no_noise = math.isinf(config.epsilon)  # the epsilon = infinity baseline
    free = 0.0 if no_noise else 1.0
    if config.method is Aggregator.TANG:
        params: TangParams | AdaDPSynParams = TangParams(sigma=free)
    else:
        chosen = {
            name: value
            for name in ("sigma0", "sigma2", "T", "lam")
            if (value := getattr(config, name)) is not None
        }
        constants = {**adadpsyn_defaults(config.M, config.variant), **chosen}
        if no_noise:
            constants.update(sigma0=0.0, sigma2=0.0)
        params = AdaDPSynParams(sigma1=free, **constants)
    return SynthesisPrivacy(
        params=params, accounting=config.accounting, M=config.M, N=config.N, tmax=config.tmax
    )


@dataclass(frozen=True)
class SynthesisPlan:
    """Everything about a token-loop job that is fixed before it reads a private record.

    The service draws it at admission, so the ledger charges exactly the event that will run.
    """

    task: TaskSpec
    config: SynthesisConfig
    privacy: SynthesisPrivacy
    schedule: tuple[str, ...]  # public target label of each shot
    # Records per partition, exact: checked against the data the job reads, never written
    # into anything a job releases (docs/privacy.md, "Who sees what").
    sizes: dict[str, int]
    delta: float
    # The AdaDPSyn planner's choice (app.privacy.planner), public; empty when it did not run.
    planner: dict[str, float | int | bool] = field(default_factory=dict)
    # The sizes of the charged partitions that sampling and pricing use: released under DP
    # (privacy.count_sigma) or declared public (then equal to ``sizes``). Empty: no noise.
    planned_sizes: dict[str, int] = field(default_factory=dict)

    @property
    def private(self) -> bool:
        return self.config.epsilon > 0

    def event(self) -> SynthesisEvent:
        if not self.private:
            return SynthesisEvent(())
        return self.privacy.synthesis_event(self.planned_sizes, self.charged())

    def charged(self) -> dict[str, int]:
        if self.task.kind == TaskKind.EXTRACTION:
            return {ALL_RECORDS: len(self.schedule)}
        return shots_per_label(self.schedule)

    def epsilon(self) -> float:
        if not self.private:
            return 0.0
        return self.privacy.accountant.dataset_epsilon(self.event(), self.delta)


def partition_sizes(task: TaskSpec, records: Sequence[Record]) -> dict[str, int]:
    return {key: len(value) for key, value in _partitions(task, records).items()}


def plan_synthesis(
    task: TaskSpec,
    sizes: dict[str, int],
    config: SynthesisConfig,
    rng: np.random.Generator,
) -> SynthesisPlan:
    """Validate the job, draw its public label schedule and calibrate its noise."""
    schedule = tuple(label_schedule(list(task.target_labels()), config.shots, rng))
    delta = config.delta if config.delta is not None else DEFAULT_DELTA
    base = _base_privacy(config)
    job = SynthesisPlan(task, config, base, schedule, dict(sizes), delta, planned_sizes={})
    if not job.private:
        return job
    charged = job.charged()
    privacy, planned_sizes = _planning_sizes(base, sizes, charged, config, delta, rng)
    planner: dict[str, float | int | bool] = {}
    if _planned(config):
        choice = plan_adadpsyn(
            PlannerShape(
                M=config.M,
                K=config.K,
                N=config.N,
                tmax=config.tmax,
                label_sizes=planned_sizes,
                shots=charged,
                epsilon=config.epsilon,
                delta=delta,
                accounting=config.accounting,
                count_sigma=privacy.count_sigma,
            )
        )
        privacy = privacy.model_copy(update={"params": choice.params()})
        planner = choice.public_stats()
    # No checks planned: sigma1 is Tang's calibrated sigma, the same event at the same price
    # (a clip changes the sensitivity, not the multiplier); without a clip the job is Tang's
    # job draw for draw. Otherwise sigma1 is calibrated as usual.
    if math.isfinite(config.epsilon) and planner.get("planner_T") != 0:
        privacy = calibrate_noise(
            privacy,
            label_sizes=planned_sizes,
            shots=charged,
            target_epsilon=config.epsilon,
            delta=delta,
        ).privacy
    for label in charged:  # fails early if, e.g., M*N exceeds a partition (paper sampling)
        privacy.sampling(planned_sizes[label])
    return SynthesisPlan(
        task, config, privacy, schedule, dict(sizes), delta, planner, planned_sizes
    )


def _planning_sizes(
    privacy: SynthesisPrivacy,
    sizes: dict[str, int],
    charged: dict[str, int],
    config: SynthesisConfig,
    delta: float,
    rng: np.random.Generator,
) -> tuple[SynthesisPrivacy, dict[str, int]]:
    """The sizes of the charged partitions that the job plans with (sampling rate, noise, the
    planner), and the privacy that pays for them (``app.privacy.unit``).

    Counts declared public are used as they are; a label without records then stops the job
    here (its count is public). Otherwise each count is released with the Gaussian mechanism
    at :data:`COUNT_SHARE` of the budget (no epsilon = inf job needs it: it has no guarantee
    to keep), and nothing later reads the exact counts: a label without records runs with
    empty teachers rather than failing on a count no mechanism released.
    """
    exact = {label: sizes.get(label, 0) for label in charged}
    if config.public_counts or math.isinf(config.epsilon):
        empty = sorted(label for label, n in exact.items() if n == 0)
        if empty:
            raise SynthesisError(f"no private records with label(s) {', '.join(empty)}")
        return privacy, exact
    if config.accounting is Accounting.PAPER:
        raise SynthesisError(
            "paper accounting draws exactly M*N records from each label, which needs the "
            "label counts public: declare them public (public_counts) or use tight accounting"
        )
    sigma = count_noise_multiplier(config.epsilon, delta)
    released = release_counts(exact, sigma, rng)
    return privacy.model_copy(update={"count_sigma": sigma}), released


def _planned(config: SynthesisConfig) -> bool:
    """Whether the planner picks AdaDPSyn's constants: the pooled variant at a finite budget,
    with none of T, sigma0, sigma2, lam given (explicit constants win)."""
    explicit = any(getattr(config, name) is not None for name in ("sigma0", "sigma2", "T", "lam"))
    return (
        config.method is Aggregator.ADADPSYN
        and config.variant is AdaDPSynVariant.POOLED
        and math.isfinite(config.epsilon)
        and not explicit
    )


def _aggregator(
    privacy: SynthesisPrivacy,
) -> Callable[[np.ndarray, np.random.Generator], AggregationResult]:
    params = privacy.params
    if isinstance(params, TangParams):
        return lambda probs, rng: gaussian_aggregate(probs, params, rng)
    return lambda probs, rng: adadpsyn_aggregate(probs, params, rng)


@dataclass
class _Shot:
    label: str
    key: str  # the partition it reads
    generated: list[int] = field(default_factory=list)
    done: bool = False
    blank: bool = True  # no text but whitespace yet (then no stop token may be taken)

    def write(self, token: int, stop_ids: set[int], backend: LLMBackend) -> None:
        """Append ``token``, or end at a stop token; detokenizes only while still blank."""
        if token in stop_ids:
            self.done = True
            return
        self.generated.append(token)
        if self.blank:
            self.blank = not backend.detokenize(self.generated).strip()


def _demonstrations(
    shots: list[_Shot], backend: LLMBackend
) -> tuple[list[Demonstration], dict[str, int]]:
    """The demonstrations to serve, and the stat that counts those left out: one that is
    only whitespace is never served (post-processing of DP outputs)."""
    written = [
        Demonstration(s.label, demonstration_text(backend.detokenize(s.generated), s.done))
        for s in shots
    ]
    demos = [d for d in written if d.text.strip()]
    dropped = len(written) - len(demos)
    return demos, ({"empty_demonstrations": dropped} if dropped else {})


def _samplings(job: SynthesisPlan, keys: set[str]) -> dict[str, Sampling]:
    """Each partition's sampler, at the rate of its planned size (released or declared
    public: never the exact count, unless declared public)."""
    if not job.private:
        return {}
    return {key: job.privacy.sampling(job.planned_sizes[key]) for key in keys}


def synthesize(
    task: TaskSpec,
    records: Sequence[Record],
    config: SynthesisConfig,
    backend: LLMBackend,
    progress: Progress | None = None,
    job: SynthesisPlan | None = None,
) -> SynthesisResult:
    """Run one synthesis job end to end (planning it first unless ``job`` is given).

    ``progress`` is called between tokens; an exception it raises (for example a
    cancellation) stops the job there.

    The job runs inside the backend's KV scope (:func:`app.llm.base.kv_scope`): a local
    model keeps each prompt's KV cache for the job's next steps (incremental decoding), in a
    store of this job's own, freed when the job ends however it ends (success, failure,
    cancellation), so that no job reads or evicts another's caches or runs faster because of
    another job's private prompts.
    """
    with kv_scope(backend) as scoped:
        return _synthesize(task, records, config, scoped, progress, job)


def _synthesize(
    task: TaskSpec,
    records: Sequence[Record],
    config: SynthesisConfig,
    backend: LLMBackend,
    progress: Progress | None,
    job: SynthesisPlan | None,
) -> SynthesisResult:
    """The body of :func:`synthesize`."""
    rng = make_rng(config.seed)
    parts = _partitions(task, records)
    sizes = {key: len(value) for key, value in parts.items()}
    if job is None:
        job = plan_synthesis(task, sizes, config, rng)
    elif job.sizes != sizes:
        raise SynthesisError("the dataset changed since the job was planned")
    privacy, schedule, private = job.privacy, job.schedule, job.private
    aggregate = _aggregator(privacy)
    stop_ids = set(backend.newline_ids) | {backend.eos_id}
    stops = np.array(sorted(stop_ids), dtype=np.int64)
    # Always offer end-of-sequence and a plain newline, so a demonstration can end.
    extra = np.array(sorted({backend.eos_id, *backend.tokenize("\n")[:1]}), dtype=np.int64)
    shots = [
        _Shot(label, ALL_RECORDS if task.kind == TaskKind.EXTRACTION else label)
        for label in schedule
    ]
    samplings = _samplings(job, {s.key for s in shots})
    planned = len(shots) * config.tmax
    calls = 0

    for step in range(config.tmax):
        active = [s for s in shots if not s.done]
        if not active:
            break
        # Public vocabulary: top-K of the prompt without private examples, plus stop tokens.
        public = [backend.tokenize(public_prompt(task, s.label, "")) + s.generated for s in active]
        top = backend.top_k(public, config.K)
        token_sets = [_with_stop_tokens(row, extra) for row in top]
        calls += 1

        if private:
            probs = _teacher_probs(task, active, token_sets, parts, samplings, backend, rng)
            calls += 1
            per_shot = probs.reshape(len(active), privacy.M, -1)
            released = [aggregate(p, rng).distribution for p in per_shot]
        else:  # epsilon = 0: the instruction-only baseline, greedy on the public prompt
            released = list(backend.next_token_probs(public, np.array(token_sets)))
            calls += 1
        choices = [
            _choice(dist, tokens, stops, blank=s.blank)
            for s, dist, tokens in zip(active, released, token_sets, strict=True)
        ]

        for shot, token_set, choice in zip(active, token_sets, choices, strict=True):
            shot.write(int(token_set[choice]), stop_ids, backend)
        if progress is not None:
            done = sum(config.tmax if s.done else step + 1 for s in shots)
            progress(min(done, planned), planned)

    demos, empty = _demonstrations(shots, backend)
    return SynthesisResult(
        task=task.name,
        method=config.method.value if private else "instruction-only",
        model=backend.name,
        demonstrations=demos,
        prompt=demonstration_prompt(task, [(d.label, d.text) for d in demos]),
        epsilon=job.epsilon(),
        delta=job.delta,
        plan=privacy.model_dump(mode="json"),  # the result's key for it
        event=to_dict(job.event()),
        # Wall time and prompt-token counts are left out: they depend on the lengths of the
        # private records sampled into teacher prompts, with no noise.
        stats={"backend_calls": calls, **empty, **job.planner},
    )


#: What ends a demonstration that ran out of tokens (T_max) before its stop token.
TRUNCATED = "…"
_SENTENCE_END = ".?!;:)]\"'"


def demonstration_text(text: str, finished: bool) -> str:
    """A demonstration's text, never cut inside a word.

    ``finished``: it ended at a stop token (newline or end of sequence), so the text is whole.
    Otherwise T_max cut it. The last token may then end inside a word, and whether it did is
    only known from the token that was never generated, so a last fragment after the last
    space is dropped unless it ends a sentence (at worst one complete word is lost), and the
    text is marked :data:`TRUNCATED`: a reader and the model both see that it stops early.
    A single word is kept. Post-processing of a DP output, so no privacy cost.
    """
    text = text.strip()
    if finished or not text:
        return text
    if not text.endswith(tuple(_SENTENCE_END)) and len(parts := text.rsplit(None, 1)) == 2:
        text = parts[0].rstrip()
    return f"{text} {TRUNCATED}"


def _teacher_probs(
    task: TaskSpec,
    active: list[_Shot],
    token_sets: list[np.ndarray],
    parts: dict[str, list[Record]],
    samplings: dict[str, Sampling],
    backend: LLMBackend,
    rng: np.random.Generator,
) -> np.ndarray:
    """One step's teacher distributions: for each active shot, the M teacher prompts built
    from freshly sampled disjoint groups of its partition, each continued by the shot's
    tokens so far, scored over the shot's public token set (one backend call for all)."""
    batch, sets = [], []
    for shot, token_set in zip(active, token_sets, strict=True):
        records_of = parts[shot.key]
        for group in samplings[shot.key].draw(len(records_of), rng):
            examples = [records_of[i] for i in group]
            prompt = teacher_prompt(task, examples, shot.label, "")
            batch.append(backend.tokenize(prompt) + shot.generated)
            sets.append(token_set)
    # A row that is no distribution becomes the uniform one, never a failed job: whether it
    # happens depends on the sampled records (as_distributions says why that is safe).
    return as_distributions(backend.next_token_probs(batch, np.array(sets)))


def _choice(distribution: np.ndarray, tokens: np.ndarray, stop: np.ndarray, *, blank: bool) -> int:
    """The index of the token to write: the released distribution's argmax, except that a
    demonstration with no text yet never takes a stop token (nor does one whose text is only
    whitespace), so that it cannot end empty at its first step. A rule on the public
    candidate set applied to a DP output: post-processing, free."""
    if not blank:
        return int(np.argmax(distribution))
    allowed = ~np.isin(tokens, stop)
    if not allowed.any():
        return int(np.argmax(distribution))
    return int(np.flatnonzero(allowed)[np.argmax(distribution[allowed])])


def _with_stop_tokens(top: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """The top-K ids with the stop tokens in place of the least probable others."""
    missing = stop[~np.isin(stop, top)]
    if missing.size == 0:
        return np.asarray(top, dtype=np.int64)
    keep = top[: len(top) - missing.size]
    return np.concatenate([keep, missing]).astype(np.int64)
