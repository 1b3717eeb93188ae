"""Job bodies: submissions and quotes, the job views, what a job cost."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from app.api.schemas.common import Delta, ResourceId, Timestamp, _Request
from app.db.models import (
    Job,
)
from app.documented import Documented
from app.ledger.ledger import ChargeState, JobCharge
from app.methods.params import json_schema
from app.methods.registry import (
    DEFAULT_METHOD,
    METHODS,
    CountsMode,
    Method,
    Stored,
    find_method,
    param_fields,
    validate_params,
)
from app.privacy.accounting import Accounting
from app.privacy.budget import Epsilon
from app.privacy.filter import Rule
from app.services.job_request import MAX_SHOTS, JobRequest, RegisteredMethod
from app.services.jobs import GroupChange, Quote, charge_note, label_noise
from app.services.rows import asked_epsilon, stored_plan
from app.synthesis.config import COVER_EVERY_LABEL_UP_TO, DEFAULT_SHOTS

# --- jobs -----------------------------------------------------------------------------------


# The job schemas are generated from the method registry when a document is generated (an
# app's OpenAPI document, at its first request) and requests are validated against it when
# they come: a method registered before either is offered, with its parameters.


def _by_text(texts: dict[str, str]) -> str:
    """``method: text`` entries, methods with the same text sharing one."""
    grouped: dict[str, list[str]] = {}
    for name, text in texts.items():
        grouped.setdefault(text, []).append(name)
    return "; ".join(f"{', '.join(names)}: {text}" for text, names in grouped.items())


def _params_schema(schema: dict[str, Any]) -> None:
    """Every registered method's parameters, each described with the methods that take it."""
    properties = {}
    for name, field in param_fields().items():
        kinds = [json_schema(param) for param in field.params.values()]
        unique = [k for i, k in enumerate(kinds) if k not in kinds[:i]]
        typed = unique[0] if len(unique) == 1 else {"anyOf": unique}
        properties[name] = {**typed, "description": field.description()}
    schema["properties"] = properties
    schema["additionalProperties"] = False


class JobParams(Documented):
    """Method parameters; unset ones take the defaults (the papers' settings). Each method
    takes its own (see app.methods); one of another method is refused, naming who takes it."""

    # Any names here: JobCreate validates them against the chosen method's parameters.
    model_config = ConfigDict(extra="allow", frozen=True, json_schema_extra=_params_schema)


def _shots_text(method: Method) -> str:
    param = method.shots_param
    return param.help.rstrip(".") if param is not None else "not used (no demonstrations)"


def _job_create_schema(schema: dict[str, Any]) -> None:
    """The registered methods, what the job's shots are to each, and who reads a public
    dataset."""
    properties = schema["properties"]
    properties["method"]["enum"] = list(METHODS)
    shots = _by_text({name: _shots_text(method) for name, method in METHODS.items()})
    default = properties["shots"]["description"]
    properties["shots"]["description"] = f"The job's shots. {shots}. {default}"
    readers = " or ".join(n for n, m in METHODS.items() if m.reads_public) or "no method"
    properties["public_dataset_id"]["description"] = (
        f"{readers} only (required): a public dataset of unlabelled texts the method reads; "
        "never charged."
    )


class JobCreate(_Request):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_job_create_schema)

    dataset_id: ResourceId
    """The private dataset the job reads and is charged to."""
    method: RegisteredMethod = DEFAULT_METHOD
    """A registered method (app.methods)."""
    public_dataset_id: ResourceId | None = None
    """For a method that reads a public dataset."""
    validation_dataset_id: ResourceId | None = None
    """A public labelled dataset (uploaded with public=true and labelled=true) of the same task
    labels: once the prompt is stored, it is scored on up to VALIDATION_MAX_RECORDS of its
    records (the prompt's validation). Post-processing of the DP output on public data: never
    charged."""
    epsilon: Epsilon
    """Target epsilon of this job; noise is calibrated to it."""
    delta: Delta | None = None
    """Default: the budget's delta."""
    shots: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=MAX_SHOTS,
        description=f"Default: one per label for a task of at most {COVER_EVERY_LABEL_UP_TO} "
        f"labels (at least {DEFAULT_SHOTS}), else {DEFAULT_SHOTS}.",
    )
    accounting: Accounting | None = None
    """Must be the budget's (default)."""
    params: JobParams | None = None

    @field_validator("params")
    @classmethod
    def _the_methods_own(cls, value: JobParams | None, info: ValidationInfo) -> JobParams | None:
        """Validated by the chosen method's parameter model; a bad method is reported on
        its own (its parameters are then unknown)."""
        method = find_method(info.data.get("method", ""))
        if value is None or method is None:
            return value
        return JobParams(**validate_params(method, value.model_extra or {}))

    def to_request(self) -> JobRequest:
        """The services' job request: the same fields; unset params are left out, so the
        method's defaults apply."""
        params = self.params.model_dump(exclude_none=True) if self.params else None
        return JobRequest(**self.model_dump(exclude={"params"}), params=params)


class JobBatch(_Request):
    """Jobs declared together on one private dataset (``POST /v1/jobs/batch``)."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[JobCreate] = Field(min_length=1, max_length=50)
    """The jobs, each as ``POST /v1/jobs`` takes one; all on the same dataset."""


class ProgressPublic(Documented):
    """Units of the job's method done, out of those planned."""

    done: int
    """Units done; a succeeded job's equals its total (it is complete, even when its method
    stopped before the planned total: progress_note says where)."""
    total: int
    unit: str
    """What the method counts (tokens, public inputs, steps, ...)."""


def _job_public_schema(schema: dict[str, Any]) -> None:
    """What each registered method's public stats hold."""
    stats = _by_text({n: m.public_stats_help for n, m in METHODS.items() if m.public_stats_help})
    schema["properties"]["stats"]["description"] = (
        f"Once succeeded, the method's public stats: DP outputs or public settings only. {stats}"
    )


class GroupQuote(Documented):
    """One label group's composed spend before and after the quoted job."""

    labels: list[str]
    """The group's labels (empty: every record)."""
    before: float
    after: float
    charged: bool
    """The job adds to this group's spend."""
    binding_before: bool
    """This group set the dataset's spend before."""
    binding_after: bool
    """This group sets it if the job is admitted."""

    @classmethod
    def from_change(cls, change: GroupChange) -> GroupQuote:
        # Same names as the service's value: read them off it (charged is its property).
        return cls.model_validate(change, from_attributes=True)


class JobQuote(Documented):
    """What a job would cost if submitted now (``POST /v1/jobs/quote``): nothing reserved.
    The dataset's spend is priced by the ledger's filter (docs/privacy.md, "The ledger's rule
    across jobs"), so ``spent_after - spent`` may be less than the job's own ``epsilon`` (0,
    when it charges labels other than the binding group's) or more (a second job, chosen
    after reading the first, is priced by the Rényi filter); ``plain_sum_after`` is what a
    plain sum of epsilons would say."""

    dataset_id: str
    epsilon: float
    """The job's own epsilon, what the ledger would reserve."""
    delta: float
    budget: float
    """The dataset's total epsilon."""
    spent_delta: float
    """The delta at which spent, spent_after and composed_after hold: the budget's."""
    spent: float
    """The dataset's spend now, under the ledger's filter."""
    spent_after: float
    """Its spend were the job admitted now (compare with budget)."""
    rule: Rule = Rule.ONE_BATCH
    """The filter's rule that prices spent."""
    rule_after: Rule = Rule.ONE_BATCH
    """The filter's rule that would price spent_after: one_batch (the count releases and one
    declared batch) or renyi_filter (jobs chosen one after another)."""
    composed_after: float = 0.0
    """The tight composition of the same charges (the ledger's price before the filter; not
    valid across adaptively chosen jobs), for comparison."""
    plain_sum: float
    """The live jobs' own epsilons and the count releases' summed, now: at plain_sum_delta."""
    plain_sum_after: float
    """The same with this job: at plain_sum_delta_after."""
    plain_sum_delta: float
    """The delta at which plain_sum holds (basic composition): the live jobs' deltas and the
    count releases' summed. Not the budget's: a plain sum may read below spent and still be
    no tighter a guarantee, since it is at another (usually larger) delta."""
    plain_sum_delta_after: float
    """plain_sum_delta with this job's delta added."""
    fits: bool
    """spent_after is within the budget: it would be admitted."""
    groups: list[GroupQuote]
    """Per label group, where groups are priced."""
    noise: dict[str, float] = Field(default_factory=dict)
    """Each label's noise multiplier (sigma) as the job would be planned: each label is
    calibrated to its own released size (token-loop methods; empty for others)."""
    counts_epsilon: float = 0.0
    """The dataset's count release's part of spent and spent_after: charged once for the dataset
    (when its first plan needed the counts), never again by a job."""

    @classmethod
    def from_quote(cls, dataset_id: str, quote: Quote, groups: list[GroupChange]) -> JobQuote:
        return cls(
            dataset_id=dataset_id,
            epsilon=quote.epsilon,
            delta=quote.delta,
            budget=quote.budget_epsilon,
            spent_delta=quote.spend_after.delta,
            spent=quote.spend_now.epsilon,
            spent_after=quote.spend_after.epsilon,
            rule=quote.spend_now.rule,
            rule_after=quote.spend_after.rule,
            composed_after=quote.spend_after.composed,
            plain_sum=quote.spend_now.plain_sum,
            plain_sum_after=quote.spend_after.plain_sum,
            plain_sum_delta=quote.spend_now.plain_sum_delta,
            plain_sum_delta_after=quote.spend_after.plain_sum_delta,
            fits=quote.fits,
            groups=[GroupQuote.from_change(g) for g in groups],
            noise=dict(quote.noise),
            counts_epsilon=quote.spend_now.counts_epsilon,
        )


class JobPublic(Documented):
    model_config = ConfigDict(json_schema_extra=_job_public_schema)

    id: str
    dataset_id: str
    dataset_name: str | None = None
    """The dataset's name (public metadata)."""
    public_dataset_id: str | None
    """The public dataset of a method that reads one."""
    validation_dataset_id: str | None = None
    """The public labelled dataset its prompt is scored on (or null)."""
    submitted_by: str | None = None
    """The ID of the API key that submitted it (null: submitted before it was recorded, or
    outside the API)."""
    method: str
    status: str
    progress: ProgressPublic
    epsilon: float
    """What the ledger charges for this job."""
    epsilon_asked: float | None = None
    """The epsilon the job was asked for (its planned noise costs ``epsilon``, at most this);
    None where the stored config does not keep it."""
    delta: float
    """The job's delta: the budget's, or the smaller one asked."""
    accounting: str | None
    counts: CountsMode | None = None
    """How the job knew the dataset's per-label record counts: released (from the dataset's count
    release, charged once to its budget: count_release_id; jobs planned before migration 0015
    released and charged their own, inside their event) or declared_public (the owner's opt-in
    on the dataset when the job was admitted); null: the method reads no counts, or the job
    was planned before counts were private (the count release)."""
    count_release_id: str | None = None
    """The dataset's count release the job was planned from (its ledger entry is of kind counts);
    null: none (declared public, a method that reads no counts, or a job planned before
    migration 0015)."""
    noise: dict[str, float] = Field(default_factory=dict)
    """Each label's noise multiplier (sigma), as the job's plan calibrated it to the label's own
    released size (token-loop methods); empty for other methods and for jobs planned before
    labels had their own noise."""
    shots: int
    progress_note: str | None
    """Why a succeeded job stopped before its planned total (PromptPATE stops when its privacy
    budget is spent), with how far it got: the run is complete (its progress reads
    total/total); null otherwise."""
    cancel_requested: bool
    read_private_data: bool
    """Whether the worker has marked the job as reading the private records (set, and committed,
    before its first read): from then on it is charged however it ends."""
    charge: ChargeState | None
    """The ledger's state of the job's charge: reserved (held while it runs), charged (final) or
    released (given back: it never read a private record)."""
    charged_epsilon: float
    """The epsilon this job counts against the budget now: its own epsilon while reserved or once
    charged, 0 once released."""
    charge_note: str
    """Why it is charged, reserved or released, in words."""
    params: dict[str, Any]
    """The method's parameters the job runs with (null: decided by the planner or the task)."""
    error: str | None
    prompt_id: str | None
    stats: dict[str, float | int | bool] | None
    settings: str | None
    """The settings the job runs with, one line naming those left at their default; null if its
    method shows none."""
    summary: str | None
    """A phrase about the finished job from its public stats (and, when its prompt serves
    fewer demonstrations than asked, how many and why); null if none."""
    demonstrations_requested: int | None = None
    """Once succeeded, the demonstrations the job was asked for (its shots); null for a
    method that plans none (promptpate chooses public texts, promptdpsgd trains vectors)."""
    demonstrations_served: int | None = None
    """Once succeeded, the demonstrations its prompt serves: fewer than requested when some
    failed the text checks and were left out (demonstrations_dropped says why)."""
    demonstrations_dropped: dict[str, int] = Field(default_factory=dict)
    """The demonstrations left out, by reason: empty (only whitespace), label_echo (only a
    label's name), too_short (fewer than the job's min_words words). The job's privacy cost
    is that of all it requested: one left out is not generated again (docs/synthesis.md)."""
    created_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None

    @classmethod
    def from_row(cls, row: Job, charge: JobCharge | None) -> JobPublic:
        """``charge`` is the job's ledger state (``services.jobs.job_charges``): the fields
        on what it cost are the ledger's word, never guessed from the job row."""
        stored = stored_plan(row)
        method = find_method(row.method)  # None: a method no longer registered here
        accounting, shots = method.summary(stored) if method else (None, 0)
        stats = dict(row.stats) if row.stats else None
        note, count = None, None
        if method is not None and row.status == "succeeded":
            if stats:
                note = method.progress_note(stats, row.progress_done, row.progress_total)
            count = method.demonstration_count(stored, stats or {})
        summary = method.stats_summary(stats) if method and stats else None
        if count is not None and count.note:
            summary = f"{summary}; {count.note}" if summary else count.note
        return cls(
            id=row.id,
            dataset_id=row.dataset_id,
            public_dataset_id=row.public_dataset_id,
            validation_dataset_id=row.validation_dataset_id,
            submitted_by=row.submitted_by,
            method=row.method,
            status=row.status,
            progress=ProgressPublic(
                # A succeeded job is complete: PromptPATE's run stops when its budget is spent,
                # usually before the last planned public input (its note and stats say where).
                done=row.progress_total if row.status == "succeeded" else row.progress_done,
                total=row.progress_total,
                unit=method.unit if method else "units",
            ),
            progress_note=note,
            epsilon=row.epsilon,
            epsilon_asked=asked_epsilon(row.config or {}),
            delta=row.delta,
            accounting=accounting,
            counts=method.counts_mode(stored) if method else None,
            count_release_id=_count_release_id(stored),
            noise=label_noise(method, stored.config),
            shots=shots,
            cancel_requested=row.cancel_requested,
            read_private_data=bool(row.touched_data),
            charge=charge.state if charge else None,
            charged_epsilon=charge.epsilon if charge else 0.0,
            charge_note=charge_note(row, charge),
            params=_params_used(method, stored) if method else {},
            error=row.error,
            prompt_id=row.prompt_set_id,
            stats=stats,
            settings=method.settings(stored) if method else None,
            summary=summary,
            demonstrations_requested=count.requested if count else None,
            demonstrations_served=count.served if count else None,
            demonstrations_dropped=dict(count.dropped) if count else {},
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
        )

    @classmethod
    def from_rows(cls, rows: Sequence[Job], charges: Mapping[str, JobCharge]) -> list[JobPublic]:
        """Views of ``rows`` with their charges (``services.jobs.job_charges``, one query)."""
        return [cls.from_row(row, charges.get(row.id)) for row in rows]

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to finish (or None if it has not done both)."""
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, (self.finished_at - self.started_at).total_seconds())

    @property
    def progress_text(self) -> str:
        """Progress as the dashboard shows it: a succeeded job is complete, whatever its
        method's planned total (with the method's note when it stopped early)."""
        if self.status == "succeeded":
            note = self.progress_note
            if note is None:
                return "complete"
            return note if note.startswith("complete") else f"complete ({note})"
        return f"{self.progress.done}/{self.progress.total} {self.progress.unit}"


def _count_release_id(stored: Stored) -> str | None:
    """The count release a job's stored config names (None: none, or an older job)."""
    release = stored.config.get("count_release")
    return str(release) if isinstance(release, str) and release else None


def _params_used(method: Method, stored: Stored) -> dict[str, Any]:
    """The method's declared parameters as the job's stored config holds them. The config
    keeps the method's validated config under one key (with the plan beside it); that is the
    part holding most parameter names, and only those names are read from it, so nothing
    else the config stores (a plan's internals) is shown."""
    names = [param.name for param in method.parameters]
    parts: list[Mapping[str, Any]] = [v for v in stored.config.values() if isinstance(v, dict)]
    best = max(parts or [stored.config], key=lambda part: sum(name in part for name in names))
    return {name: best[name] for name in names if name in best}
