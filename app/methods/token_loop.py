"""The token loop (``app.synthesis``): demonstrations generated token by token from noisy
aggregates of teacher distributions, with Tang et al.'s or AdaDPSyn's aggregator.

One class, one instance per aggregator: the two share parameters, config and plan, and differ
in the mechanism a token step runs (``SynthesisConfig.method``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from app.privacy.params import Aggregator
from app.privacy.synthesis import SynthesisPrivacy
from app.results import SynthesisResult
from app.synthesis.config import (
    COVER_EVERY_LABEL_UP_TO,
    DEFAULT_K,
    DEFAULT_MIN_WORDS,
    DEFAULT_SHOTS,
    GENERIC_DEFAULTS,
    TASK_DEFAULTS,
    SynthesisConfig,
    default_shots,
)
from app.synthesis.generator import LEFT_OUT_STATS, SynthesisPlan, plan_synthesis, synthesize
from app.synthesis.tasks import TaskSpec

from .base import Counts, CountsMode, DemonstrationCount, Method, RunInputs, Stored, WrappedPlan
from .kinds import MethodKind
from .params import declare

# SynthesisConfig leaves most of these undescribed (their defaults depend on the task or M).
_HELP = {
    "M": "Teacher subsets per token (default: the task's, from the AdaDPSyn paper).",
    "N": "Records per teacher subset (default: the task's).",
    "tmax": "Maximum tokens per demonstration (default: the task's).",
    "sigma0": "AdaDPSyn GoodRadius noise multiplier (default: the variant's row for M).",
    "sigma2": "AdaDPSyn coverage-check noise multiplier (default: the variant's row for M).",
    "T": "AdaDPSyn rounds of radius reduction (default: the variant's row for M).",
    "lam": "AdaDPSyn noise margin factor lambda (default: the variant's row for M).",
    "variant": "AdaDPSyn: 'pooled' (every charged mean is used) or 'paper' (Algorithm 1 as "
    "published).",
    "min_words": "A demonstration of fewer words, or one that only repeats a label's name, is "
    "left out of the prompt and noted (default 2; post-processing, no privacy cost).",
}
# What a client may set; epsilon, delta, accounting and shots are the job's own fields, and
# a seed (which makes the noise predictable) never comes from a client.
PARAMETERS = declare(
    SynthesisConfig,
    ("M", "N", "tmax", "K", "variant", "sigma0", "sigma2", "T", "lam", "min_words"),
    help=_HELP,
)
# The default depends on the task (one per label for a few labels): none fixed, the help says.
SHOTS = replace(
    declare(SynthesisConfig, ("shots",))[0],
    default=None,
    help=f"Demonstrations to generate; default one per label for a task of at most "
    f"{COVER_EVERY_LABEL_UP_TO} labels (at least {DEFAULT_SHOTS}), else {DEFAULT_SHOTS}.",
)
# Each aggregator's name for people (``Method.title``).
TITLES = {MethodKind.TANG: "DP few-shot generation", MethodKind.ADADPSYN: "AdaDPSyn"}


@dataclass(frozen=True)
class TokenLoopMethodPlan(WrappedPlan):
    """The token loop's :class:`MethodPlan`: a :class:`SynthesisPlan` (label schedule drawn,
    noise calibrated) behind the method interface."""

    plan: SynthesisPlan

    @property
    def progress_total(self) -> int:
        return len(self.plan.schedule) * self.plan.config.tmax

    def stored(self) -> Stored:
        return Stored(
            config={
                "synthesis": self.plan.config.model_dump(mode="json"),
                "plan": self.plan.privacy.model_dump(mode="json"),  # the stored key
                # released estimates or declared public: what is priced and sampled at
                "planned_sizes": self.plan.planned_sizes,
                "count_release": self.plan.release_id or None,  # the dataset's, if released
                "planner": self.plan.planner,
                "task": self.plan.task.name,  # for the settings line (its defaults)
            },
            schedule=list(self.plan.schedule),
            delta=self.plan.delta,
        )

    def execute(self, job: RunInputs) -> SynthesisResult:
        plan = self.plan
        return synthesize(
            plan.task, job.records, plan.config, job.backend, progress=job.progress, job=plan
        )


class TokenLoop(Method):
    """The token loop with one aggregator (``name`` tang or adadpsyn)."""

    parameters = PARAMETERS
    shots_param = SHOTS
    config_class = SynthesisConfig
    stored_key: ClassVar[str] = "synthesis"
    zero_epsilon_baseline: ClassVar[bool] = True  # instruction-only: epsilon = 0
    # The audit's --quick profile: a few minutes on the CPU model (full: the task's shape).
    audit_quick_params: ClassVar[dict[str, Any]] = {"M": 10, "N": 1, "tmax": 8, "K": 50}
    unit: ClassVar[str] = "tokens"
    verb: ClassVar[str] = "synthesising"
    public_stats_help: ClassVar[str] = (
        "when AdaDPSyn's planner chose the constants (adadpsyn, pooled), its choice: "
        "planner_T, planner_checks, planner_check_share, planner_mu, planner_shrink, "
        "planner_margin, planner_clip, planner_tang_sigma, planner_agreement, "
        "planner_tang_agreement "
        "(docs/privacy.md)"
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.title = TITLES[MethodKind(name)]
        self.aggregator = Aggregator(name)

    def job_shots(self, task: TaskSpec, shots: int | None) -> int:
        """One per label for a task of a few labels (:func:`default_shots`) unless given."""
        return shots if shots is not None else default_shots(len(task.labels))

    def build_config(self, task: TaskSpec, fields: dict[str, Any]) -> SynthesisConfig:
        """The task's M, N and T_max unless given, and this instance's aggregator."""
        return SynthesisConfig.for_task(task.name, method=self.aggregator, **fields)

    def plan(self, task: TaskSpec, config: Any, counts: Counts) -> TokenLoopMethodPlan:
        # Whether the counts are public is the data owner's word, carried by the counts: the
        # job's config records it (it decides the sampling and what the job releases).
        config = config.model_copy(update={"public_counts": counts.declared_public})
        release = counts.release
        release_id = release.id if release is not None else ""
        return TokenLoopMethodPlan(plan_synthesis(task, counts.labels, config, release_id))

    def rebuild(self, task: TaskSpec, stored: Stored) -> TokenLoopMethodPlan:
        config = self.stored_config(stored)
        privacy = SynthesisPrivacy.model_validate(stored.config["plan"])
        planner = dict(stored.config.get("planner") or {})  # absent for older jobs
        # Jobs planned before migration 0012 priced and sampled with the exact counts ("sizes").
        planned = stored.config.get("planned_sizes") or stored.config.get("sizes") or {}
        planned_sizes = {str(k): int(v) for k, v in planned.items()}
        schedule = tuple(stored.schedule)
        release_id = str(stored.config.get("count_release") or "")
        return TokenLoopMethodPlan(
            SynthesisPlan(
                task, config, privacy, schedule, stored.delta, planner, planned_sizes, release_id
            )
        )

    def audit_subset(self, config: SynthesisConfig) -> int:
        """``M * N`` records of each label: a demonstration of label L reads only L's
        records, and with exactly ``M * N`` of them every teacher step sees every one (rate
        1 under tight accounting), the setting most favourable to the attacker."""
        return config.M * config.N

    def public_stats(self, result: SynthesisResult) -> dict[str, Any] | None:
        """The AdaDPSyn planner's choice (public inputs only) and how many demonstrations
        came out empty and were left out (a function of the DP outputs); None if neither."""
        public = {
            k: v
            for k, v in result.stats.items()
            if k.startswith("planner_") or k in LEFT_OUT_STATS.values()
        }
        return public or None

    def report(self, result: SynthesisResult) -> str | None:
        lines = [line for line in (_empty_report(result), _planner_report(result)) if line]
        return "\n".join(lines) or None

    def prompt_notes(
        self, stored: Stored, stats: Mapping[str, Any], labels: Sequence[str]
    ) -> list[str]:
        """Which planned demonstrations the prompt lacks, and which labels it then does not
        demonstrate: the stored schedule (public randomness) against the labels of the served
        demonstrations (DP outputs). The token loop leaves a demonstration out only when it
        came out empty, too short or only a label's name (the ``stats`` of
        :data:`LEFT_OUT_STATS` count them; the schedule says of which label, for jobs that
        predate the stats too)."""
        min_words = _min_words(stored)
        notes = empty_notes(stored.schedule, labels, left_out_reason(stats, min_words))
        return [*notes, NOT_REGENERATED.format(planned=len(stored.schedule))] if notes else []

    def demonstration_count(self, stored: Stored, stats: Mapping[str, Any]) -> DemonstrationCount:
        """The shots the job planned (its schedule), those left out by reason (the stats of
        :data:`LEFT_OUT_STATS`) and the rest, served; with a note in words when some were
        left out. Jobs before the stats count none left out."""
        requested = len(stored.schedule)
        dropped = {key: int(stats[stat]) for stat, key in DROPPED_KEYS.items() if stats.get(stat)}
        served = max(0, requested - sum(dropped.values()))
        note = None
        if dropped:
            words = _min_words(stored)
            why = ", ".join(
                f"{n} {_REASONS[stat].format(min_words=words)}"
                for stat, key in DROPPED_KEYS.items()
                if (n := dropped.get(key))
            )
            note = (
                f"serves {served} of the {requested} demonstrations asked for ({why}: left "
                f"out); the privacy cost is that of all {requested}, as a demonstration left "
                "out is not generated again"
            )
        return DemonstrationCount(requested, served, dropped, note)

    def summary(self, stored: Stored) -> tuple[str | None, int]:
        return stored.config.get("synthesis", {}).get("accounting"), len(stored.schedule)

    def counts_mode(self, stored: Stored) -> CountsMode | None:
        """Declared public (the config's ``public_counts``), or released (the plan has a
        count release's noise); None for a run without noise (epsilon 0 or inf) and for
        jobs planned before migration 0012."""
        if (stored.config.get("synthesis") or {}).get("public_counts"):
            return CountsMode.DECLARED_PUBLIC
        if stored.config.get("count_release"):
            return CountsMode.RELEASED
        if (stored.config.get("plan") or {}).get("count_sigma") is not None:
            return CountsMode.RELEASED
        return None

    def settings(self, stored: Stored) -> str | None:
        """Shots, M, N, tmax and K, naming those at their default; None for the
        instruction-only baseline (it reads no M, N or K) and for jobs stored without their
        task's name (older ones)."""
        task = stored.config.get("task")
        config = stored.config.get("synthesis") or {}
        if task is None or not config.get("epsilon"):
            return None
        values = {name: config.get(name) for name in ("M", "N", "tmax", "K")}
        return settings_line(str(task), self.name, config.get("shots"), **values)


def settings_line(task_name: str, method: str, shots: int | None, **given: int | None) -> str:
    """Which shots, M, N, tmax and K a token-loop run uses, naming those at their default.

    Printed when a run or job starts: a custom task falls back to generic values that a new
    user could otherwise only find in the source. ``given``: M, N, tmax, K (None: default).
    """
    known = task_name in TASK_DEFAULTS
    defaults = {**(TASK_DEFAULTS.get(task_name) or GENERIC_DEFAULTS), "K": DEFAULT_K}
    values = {name: given.get(name) or default for name, default in defaults.items()}
    defaulted = [name for name, value in values.items() if value == defaults[name]]
    source = f"the paper's defaults for {task_name}" if known else "defaults for custom tasks"
    note = f" ({', '.join(defaulted)}: {source}; see docs/synthesis.md)" if defaulted else ""
    listed = ", ".join(f"{name} {value}" for name, value in values.items())
    return f"{method}: {shots or DEFAULT_SHOTS} shots, {listed}{note}"


def _empty_report(result: SynthesisResult) -> str | None:
    """Demonstrations left out of the prompt (empty, too short, only a label): say so."""
    left_out = sum(int(result.stats.get(key, 0)) for key in LEFT_OUT_STATS.values())
    if not left_out:
        return None
    reason = left_out_reason(result.stats, None)
    return (
        f"{left_out} demonstration(s) {reason} and were left out of the prompt, which holds "
        f"{len(result.demonstrations)}"
    )


#: Why a token-loop demonstration is left out of its prompt (``_unusable`` in
#: ``app.synthesis.generator``): the prompt's notes say it in these words.
EMPTY_REASON = "came out empty (only whitespace after T_max tokens)"
_REASONS = {
    "empty_demonstrations": EMPTY_REASON,
    "echo_demonstrations": "only repeated a label's name",
    "short_demonstrations": "came out shorter than {min_words} words",
}


#: The key of each left-out stat in a job's and a prompt's ``demonstrations_dropped``.
DROPPED_KEYS = {
    "empty_demonstrations": "empty",
    "echo_demonstrations": "label_echo",
    "short_demonstrations": "too_short",
}
assert set(DROPPED_KEYS) == set(LEFT_OUT_STATS.values())

#: The prompt's note on what its left-out demonstrations cost (docs/synthesis.md, "Left out,
#: not regenerated": each label's noise spends the job's epsilon on the planned shots).
NOT_REGENERATED = (
    "The job's privacy cost is that of all {planned} planned demonstrations: one left out is "
    "not generated again (each label's noise was set to spend the job's whole epsilon on the "
    "planned ones)."
)


def _min_words(stored: Stored) -> int:
    """The job's ``min_words`` (the default for jobs stored before it existed)."""
    return int((stored.config.get("synthesis") or {}).get("min_words") or DEFAULT_MIN_WORDS)


def left_out_reason(stats: Mapping[str, Any], min_words: int | None) -> str:
    """The reasons the stats count, in words ("came out empty (...) or only repeated a
    label's name"); the empty one when none is counted (jobs before the stats)."""
    words = min_words or DEFAULT_MIN_WORDS
    reasons = [text.format(min_words=words) for key, text in _REASONS.items() if stats.get(key)]
    return " or ".join(reasons) or EMPTY_REASON


def empty_notes(
    schedule: Sequence[str], served: Sequence[str], reason: str = EMPTY_REASON
) -> list[str]:
    """The prompt's notes on demonstrations ``schedule`` planned that ``served`` (the labels
    of the demonstrations in the prompt) lacks: how many of which label were left out and
    why (``reason``), and the labels left with none; [] when none is missing."""
    held = Counter(served)
    planned = Counter(str(label) for label in schedule)
    lost = {label: n - held[label] for label, n in sorted(planned.items()) if n > held[label]}
    if not lost:
        return []
    notes = [_lost_note(lost, len(served), len(schedule), reason)]
    gone = [repr(label) for label in lost if not held[label]]
    if gone:
        which = f"label {gone[0]}" if len(gone) == 1 else f"labels {', '.join(gone)}"
        them = "it" if len(gone) == 1 else "them"
        outcome = "came out empty" if reason == EMPTY_REASON else "was left out"
        notes.append(
            f"The prompt does not demonstrate {which}: every demonstration planned for {them} "
            f"{outcome}."
        )
    return notes


def _lost_note(lost: Mapping[str, int], held: int, planned: int, reason: str) -> str:
    """One sentence: the demonstrations left out (per label) and what the prompt holds."""
    total = sum(lost.values())
    if len(lost) == 1:
        label, n = next(iter(lost.items()))
        what = f"{n} demonstration{'s' if n > 1 else ''} of label {label!r}"
    else:
        per = ", ".join(f"{n} of label {label!r}" for label, n in lost.items())
        what = f"{total} demonstrations ({per})"
    verb = "was" if total == 1 else "were"
    holds = (
        f"{held} of the {planned} planned"
        if held
        else f"none of the {planned} planned (it is the instruction alone)"
    )
    return f"{what} {reason} and {verb} left out; the prompt holds {holds}."


def _planner_report(result: SynthesisResult) -> str | None:
    """The AdaDPSyn planner's choice in words; None when no planner ran."""
    stats = result.stats
    if "planner_T" not in stats:
        return None
    clip = stats.get("planner_clip") or 0.0
    if not stats["planner_checks"] and clip:
        return (
            f"planner: no coverage checks; teachers clipped to {clip} around the uniform "
            "distribution (Tang's price, a smaller sensitivity) for this shape"
        )
    if not stats["planner_checks"]:
        return "planner: no coverage checks (T = 0, Tang's mean) for this shape"
    return (
        f"planner: T {stats['planner_T']}, checks take {stats['planner_check_share']:.0%} "
        f"of each step's budget, mu {stats['planner_mu']}, margin "
        f"{stats.get('planner_margin', 0.0)}, shrink {stats['planner_shrink']}"
    )
