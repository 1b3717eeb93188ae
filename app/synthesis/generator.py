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

import dataclasses
import hashlib
import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    AggregatorParams,
    TangParams,
    adadpsyn_defaults,
)
from app.privacy.planner import PlannerShape, choose_at, tang_multiplier
from app.privacy.rng import make_rng
from app.privacy.sampling import Sampling
from app.privacy.synthesis import SynthesisPrivacy, label_schedule, shots_per_label
from app.privacy.tang import AggregationResult, gaussian_aggregate
from app.privacy.unit import DEFAULT_DELTA, CountRelease, local_release
from app.results import Demonstration, Progress, SynthesisError, SynthesisResult
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import Record
from app.synthesis.markup import clean_markup, end_cleanly
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
    It holds no exact count unless the data owner declared the counts public.
    """

    task: TaskSpec
    config: SynthesisConfig
    privacy: SynthesisPrivacy
    schedule: tuple[str, ...]  # public target label of each shot
    delta: float
    # The AdaDPSyn planner's choice (app.privacy.planner), public; empty when it did not run.
    planner: dict[str, Any] = field(default_factory=dict)
    # The sizes of the charged partitions that sampling and pricing use: the estimates of the
    # dataset's count release, or the counts declared public. Empty: no noise.
    planned_sizes: dict[str, int] = field(default_factory=dict)
    # The count release the sizes come from ("": declared public, or a local run's own).
    release_id: str = ""
    # A local run's own count release (``dpsyn synthesize``, studies): the run's reported
    # epsilon and delta add its cost (app.privacy.unit). None in the service, whose release
    # is the dataset's, charged on its own ledger line.
    local_release: CountRelease | None = None

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

    def reported(self) -> tuple[float, float]:
        """The run's (epsilon, delta): the job's, plus a local run's own count release
        (adaptive composition adds them: app.privacy.unit)."""
        epsilon, delta = self.epsilon(), self.delta
        if self.local_release is None:
            return epsilon, delta
        return epsilon + self.local_release.epsilon, delta + self.local_release.delta


def partition_sizes(task: TaskSpec, records: Sequence[Record]) -> dict[str, int]:
    return {key: len(value) for key, value in _partitions(task, records).items()}


def schedule_rng(config: SynthesisConfig) -> np.random.Generator:
    """The generator of a job's label schedule: seeded by the job's public config (its seed
    too, in a seeded run), so that the same request always plans the same schedule and
    costs the same epsilon, in a quote and in the job it admits. The schedule is public
    randomness over the public label set; no noise is ever drawn from this generator.
    ``min_words`` (post-processing of the outputs) is left out: it changes nothing charged,
    and a job's schedule stays what it was before the parameter existed."""
    body = json.dumps(
        config.model_dump(mode="json", exclude={"min_words"}), sort_keys=True
    ).encode()
    return np.random.default_rng(int.from_bytes(hashlib.sha256(body).digest()[:16], "big"))


def plan_synthesis(
    task: TaskSpec,
    planned_sizes: Mapping[str, int],
    config: SynthesisConfig,
    release_id: str = "",
) -> SynthesisPlan:
    """Validate the job, draw its public label schedule and calibrate each label's noise.

    ``planned_sizes``: each label's size as the job may know it, declared public
    (``config.public_counts``) or the estimate of the dataset's count release
    (``release_id`` names it); :class:`app.methods.base.Counts` is where they come from.
    Deterministic: the same inputs give the same plan."""
    schedule = tuple(label_schedule(list(task.target_labels()), config.shots, schedule_rng(config)))
    delta = config.delta if config.delta is not None else DEFAULT_DELTA
    base = _base_privacy(config)
    job = SynthesisPlan(task, config, base, schedule, delta, release_id=release_id)
    if not job.private:
        return job
    charged = job.charged()
    sizes = _planning_sizes(planned_sizes, charged, config)
    privacy, planner = _calibrated(base, sizes, charged, config, delta)
    for label in charged:  # fails early if, e.g., M*N exceeds a partition (paper sampling)
        privacy.sampling(sizes[label])
    return SynthesisPlan(task, config, privacy, schedule, delta, planner, sizes, release_id)


def _planning_sizes(
    planned_sizes: Mapping[str, int], charged: dict[str, int], config: SynthesisConfig
) -> dict[str, int]:
    """The sizes of the charged partitions. Counts declared public are used as they are, and
    a label without records then stops the job here (its count is public). Released
    estimates are at least 1, so a label without records runs with empty teachers rather
    than failing on a count no mechanism released. Paper accounting needs the counts public.
    """
    sizes = {label: int(planned_sizes.get(label, 0)) for label in charged}
    if config.public_counts or math.isinf(config.epsilon):
        empty = sorted(label for label, n in sizes.items() if n == 0)
        if empty:
            raise SynthesisError(f"no private records with label(s) {', '.join(empty)}")
        return sizes
    if config.accounting is Accounting.PAPER:
        raise SynthesisError(
            "paper accounting draws exactly M*N records from each label, which needs the "
            "label counts public: declare them public (public_counts) or use tight accounting"
        )
    return {label: max(1, n) for label, n in sizes.items()}


def _calibrated(
    base: SynthesisPrivacy,
    sizes: dict[str, int],
    charged: dict[str, int],
    config: SynthesisConfig,
    delta: float,
) -> tuple[SynthesisPrivacy, dict[str, Any]]:
    """Each charged label's parameters, calibrated to the job's epsilon on its own.

    Why per label: under add/remove neighbours one record is in one label's partition, so
    the job's epsilon is the largest of its labels' (``Accountant.exposures``), and each
    label can take the noise that its own size and shots need; one multiplier for all would
    give every label the noise of the smallest. AdaDPSyn's planner picks its constants once
    per job (:func:`_planner_choice`); each label runs them at its own multiplier.

    Paper accounting prices replace-one neighbours, under which one record can be swapped
    for a record of another label and touch two partitions (``Accountant.exposures``): a
    label held to the target alone would let such a pair exceed it, so there every label
    is calibrated on the job's whole shape (one multiplier, the same for all)."""
    if config.accounting is Accounting.PAPER:
        whole = (dict(sizes), dict(charged))
        shapes = {label: whole for label in charged}
    else:
        shapes = {label: ({label: sizes[label]}, {label: n}) for label, n in charged.items()}
    choice, planner = _planner_choice(shapes, config, delta) if _planned(config) else (None, {})
    label_params: dict[str, Any] = {}
    for label, (one_size, one_shots) in shapes.items():
        privacy = base
        if choice is not None:
            privacy = base.model_copy(update={"params": choice[label]})
        # No checks planned: sigma1 is Tang's calibrated sigma, the same event at the same
        # price (a clip changes the sensitivity, not the multiplier); without a clip the job
        # is Tang's job draw for draw. Otherwise sigma1 is calibrated as usual.
        if math.isfinite(config.epsilon) and planner.get("planner_T") != 0:
            privacy = calibrate_noise(
                privacy,
                label_sizes=one_size,
                shots=one_shots,
                target_epsilon=config.epsilon,
                delta=delta,
            ).privacy
        label_params[label] = privacy.params
    first = next(iter(label_params.values()))
    return base.model_copy(update={"params": first, "label_params": label_params}), planner


def _planner_choice(
    shapes: Mapping[str, tuple[dict[str, int], dict[str, int]]],
    config: SynthesisConfig,
    delta: float,
) -> tuple[dict[str, AdaDPSynParams], dict[str, Any]]:
    """AdaDPSyn's constants for each label: the planner's choice (``app.privacy.planner``)
    made once, at the median of the labels' Tang multipliers, then set at each label's own
    multiplier; and the choice's public stats (``planner_tang_sigma`` is that median).

    Once per job, not per label: a choice costs seconds of simulation per multiplier, and
    the labels of a job differ in multiplier by a few buckets of the planner's grid, where
    its choice rarely changes."""
    tang = {
        label: tang_multiplier(_shape(config, delta, one_size, one_shots))
        for label, (one_size, one_shots) in shapes.items()
    }
    reference = float(np.median(list(tang.values())))
    choice = choose_at(config.M, config.K, reference)
    params = {label: choice.candidate.params(sigma) for label, sigma in tang.items()}
    return params, choice.public_stats()


def _shape(
    config: SynthesisConfig, delta: float, sizes: dict[str, int], shots: dict[str, int]
) -> PlannerShape:
    return PlannerShape(
        M=config.M,
        K=config.K,
        N=config.N,
        tmax=config.tmax,
        label_sizes=sizes,
        shots=shots,
        epsilon=config.epsilon,
        delta=delta,
        accounting=config.accounting,
    )


def plan_local(
    task: TaskSpec,
    records: Sequence[Record],
    config: SynthesisConfig,
    rng: np.random.Generator,
) -> SynthesisPlan:
    """A run's plan straight from its records (a local run, no service): the counts are
    declared public (``config.public_counts``), or released here at
    :data:`~app.privacy.unit.COUNT_RELEASE_SHARE` of the run's target, the job taking the
    rest; the plan's :meth:`SynthesisPlan.reported` cost adds the two."""
    sizes = partition_sizes(task, records)
    release = local_release(sizes, config.public_counts, config.epsilon, config.delta, rng)
    if release is None:
        return plan_synthesis(task, sizes, config)
    delta = config.delta if config.delta is not None else DEFAULT_DELTA
    job = config.model_copy(
        update={"epsilon": config.epsilon - release.epsilon, "delta": delta - release.delta}
    )
    plan = plan_synthesis(task, release.estimates(), job)
    return dataclasses.replace(plan, local_release=release)


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
    params: AggregatorParams,
) -> Callable[[np.ndarray, np.random.Generator], AggregationResult]:
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
    shots: list[_Shot], backend: LLMBackend, task: TaskSpec, min_words: int
) -> tuple[list[Demonstration], dict[str, int]]:
    """The demonstrations to serve, and the stats that count those left out (post-processing
    of DP outputs, no cost): one that is only whitespace (once what is not text is taken out:
    :func:`only_text`), one that only repeats a label's name or answer word, and one of fewer
    than ``min_words`` words teach the model nothing about the task ("The" and
    "Mean of Transportation" were served on a 14-label task)."""
    written = [
        Demonstration(
            s.label, demonstration_text(only_text(backend.detokenize(s.generated)), s.done)
        )
        for s in shots
    ]
    names = {_words_only(name) for label in task.labels for name in (label, task.verbalise(label))}
    demos, dropped = [], Counter[str]()
    for demo in written:
        reason = _unusable(demo.text, names, min_words)
        if reason is None:
            demos.append(demo)
        else:
            dropped[reason] += 1
    return demos, {LEFT_OUT_STATS[reason]: n for reason, n in sorted(dropped.items())}


#: The job stat that counts the demonstrations left out for each reason (:func:`_unusable`).
LEFT_OUT_STATS = {
    "empty": "empty_demonstrations",
    "echo": "echo_demonstrations",
    "short": "short_demonstrations",
}


def _unusable(text: str, label_names: set[str], min_words: int) -> str | None:
    """Why a demonstration is not served (a key of :data:`LEFT_OUT_STATS`), or None."""
    if not text.strip():
        return "empty"
    if _words_only(text) in label_names:
        return "echo"
    if len(text.split()) < min_words:
        return "short"
    return None


def _words_only(text: str) -> str:
    """``text`` case-folded, its words joined by one space, punctuation dropped."""
    return " ".join("".join(c if c.isalnum() else " " for c in text.casefold()).split())


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
    if job is None:
        job = plan_local(task, records, config, rng)
    privacy, schedule, private = job.privacy, job.schedule, job.private
    aggregators = {label: _aggregator(privacy.params_for(label)) for label in set(schedule)}
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
            released = [
                aggregators[s.label](p, rng).distribution
                for s, p in zip(active, per_shot, strict=True)
            ]
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

    demos, left_out = _demonstrations(shots, backend, task, config.min_words)
    epsilon, delta = job.reported()
    return SynthesisResult(
        task=task.name,
        method=config.method.value if private else "instruction-only",
        model=backend.name,
        demonstrations=demos,
        prompt=demonstration_prompt(task, [(d.label, d.text) for d in demos]),
        epsilon=epsilon,
        delta=delta,
        plan=privacy.model_dump(mode="json"),  # the result's key for it
        event=to_dict(job.event()),
        # Wall time and prompt-token counts are left out: they depend on the lengths of the
        # private records sampled into teacher prompts, with no noise.
        stats={"backend_calls": calls, **left_out, **job.planner},
    )


# Chat and vision template tokens, as a backend's detokenizer may spell them out when its
# tokenizer does not mark them special (a local backend never offers them: its top_k leaves
# them out; a vLLM server's tokenizer is its own).
_TEMPLATE_TOKEN = re.compile(
    r"<(?:start|end)_of_[a-z_]+>|<unused\d+>|<image_soft_token>|<\|[A-Za-z_]+\|>|\[multimodal\]"
)


def only_text(text: str) -> str:
    """``text`` without template tokens and without private-use, unassigned, surrogate and
    control characters (tab and newline stay): what a downstream model should be shown.
    Issue 43: a served prompt held ``<start_of_image>`` and U+F071. Post-processing of a
    DP output, so no privacy cost."""
    text = _TEMPLATE_TOKEN.sub("", text)
    return "".join(
        c
        for c in text
        if not (
            unicodedata.category(c) in ("Co", "Cs", "Cn")
            or (unicodedata.category(c) == "Cc" and c not in "\t\n")
        )
    )


def demonstration_text(text: str, finished: bool) -> str:
    """A demonstration's text as it is stored and served: without markup
    (:func:`~app.synthesis.markup.clean_markup`) and, when T_max cut it (``finished`` is
    False: it never reached its stop token), ended at its last whole sentence or word
    (:func:`~app.synthesis.markup.end_cleanly`), never cut inside a word nor marked with a
    display ellipsis. Post-processing of a DP output, so no privacy cost."""
    text = clean_markup(text)
    return text if finished or not text else end_cleanly(text)


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
