"""Request and response bodies. Responses are built field by field from rows
(``from_row``), so an ORM row is never returned and private records never appear.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from fastapi import Query
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from app.db.models import (
    AdviceStatus,
    ApiKey,
    Dataset,
    DatasetKind,
    Job,
    KeyScope,
    LedgerEntry,
    LedgerKind,
    PromptSet,
    as_utc,
)
from app.eval.advice import AdviceConfig
from app.ledger.ledger import REASON_KEY, ChargeState, JobCharge
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
from app.privacy.unit import DEFAULT_DELTA
from app.services.budgets import (
    BudgetView,
    CountReleaseView,
    DatasetSpend,
    DeltaSource,
    GroupSpend,
    SpendLevel,
    display_groups,
)
from app.services.job_request import MAX_SHOTS, JobRequest, RegisteredMethod
from app.services.jobs import GroupChange, Quote, charge_note, label_noise
from app.services.rows import asked_epsilon, stored_plan
from app.services.storable import DATASET_NAME_MAX_CHARS, find_problem
from app.services.tenants import KEY_NAME_MAX_CHARS, key_name_problem
from app.synthesis.config import COVER_EVERY_LABEL_UP_TO, DEFAULT_SHOTS

Timestamp = Annotated[datetime, AfterValidator(as_utc)]
# Numbers are strict: JSON true is not an epsilon of 1, nor "2" a count of 2 (see Epsilon).
Delta = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False, strict=True)]
Name = Annotated[str, Field(min_length=1, max_length=DATASET_NAME_MAX_CHARS)]  # its column's
ResourceId = Annotated[str, Field(min_length=1, max_length=128)]  # IDs are 32 hex digits
# Paging: a page of at most 500; an offset the databases' 64-bit integers can hold.
MAX_OFFSET = 2**63 - 1
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
IdFilter = Annotated[str | None, Query(max_length=128)]
COLUMN_NAME_MAX_CHARS = 200  # a header name the readers look up; never stored
Column = Annotated[str, Field(min_length=1, max_length=COLUMN_NAME_MAX_CHARS)]


class _Request(BaseModel):
    """A request body: unknown fields are refused, and so is any string the stores cannot
    hold (NUL, unpaired surrogates), wherever it sits, before a route sees it."""

    model_config = ConfigDict(extra="forbid")
    stored: ClassVar[bool] = True  # False: never stored, so NUL is harmless (still UTF-8)

    @model_validator(mode="after")
    def _storable(self) -> Any:
        for name in type(self).model_fields:
            problem = find_problem(getattr(self, name), name, nul=self.stored)
            if problem:
                raise ValueError(problem)
        return self


class ErrorDetail(BaseModel):
    code: str
    message: str
    type: str = Field(description="OpenAI's error type for the status (not_found_error, ...).")
    param: str | None = Field(None, description="The request field at fault, where one is.")


class ErrorBody(BaseModel):
    error: ErrorDetail


# --- datasets -------------------------------------------------------------------------------


PUBLIC_DESCRIPTION = (
    "true: a public dataset of unlabelled texts for PromptPATE jobs (only the text column is "
    "read unless labelled; never charged, takes no budget, task optional)."
)
LABELLED_DESCRIPTION = (
    "Public only. true: keep the label column too (a task is then required, and every label "
    "must be the task's): the dataset can be a job's validation_dataset_id, on which the "
    "stored prompt is scored (never charged)."
)
COUNTS_PUBLIC_DESCRIPTION = (
    "Private only. true: the data owner declares the per-label record counts public (an "
    "audited opt-in, changeable later with PUT /v1/datasets/{id}/counts-public): jobs then "
    "plan with the exact counts and release none, and paper accounting is allowed. Default "
    "false: every job releases the counts it plans with under DP, charged to the budget."
)


class _UploadOptions(_Request):
    """The fields a JSON upload and a multipart upload share, declared once so that the
    two ways to upload accept the same options."""

    name: Name | None = Field(None, description="Default: the task's name ('public').")
    public: bool = Field(False, description=PUBLIC_DESCRIPTION)
    labelled: bool = Field(False, description=LABELLED_DESCRIPTION)
    counts_public: bool = Field(False, description=COUNTS_PUBLIC_DESCRIPTION)
    text_column: Column = "text"
    label_column: Column = Field(
        "label", description="Ignored for a public dataset unless labelled."
    )


class DatasetCreate(_UploadOptions):
    """A JSON upload. ``records`` are objects holding (at least) the two named columns (a
    public dataset: the text column)."""

    task: str | dict[str, Any] | None = Field(
        None,
        description="A built-in task name (agnews, trec, trec14, sst2, mitg, mitd) or a custom "
        "task spec object (see TaskSpec: name, kind, instruction, icl_instruction, text_field, "
        "label_field, labels | slot and candidates, verbalisers). Required unless public.",
    )
    records: list[dict[str, Any]] = Field(
        min_length=1,
        description="Objects holding the text column (a string) and the label column.",
    )

    @model_validator(mode="after")
    def _texts_are_strings(self) -> DatasetCreate:
        for i, record in enumerate(self.records):
            if self.text_column in record and not isinstance(record[self.text_column], str):
                column = self.text_column[:64]
                raise ValueError(f"records[{i}].{column}: the text must be a string")
        return self


class DatasetUploadForm(_UploadOptions):
    """The non-file fields of a multipart upload (the file is the part named ``file``)."""

    task: str | None = Field(
        None,
        min_length=1,
        description="Built-in task name or a task spec as JSON. Required unless public.",
    )
    format: Literal["csv", "tsv", "jsonl"] | None = Field(
        None, description="Default: from the file name's extension."
    )


_NAME: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": DATASET_NAME_MAX_CHARS}
_BOUNDED: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": COLUMN_NAME_MAX_CHARS}


def _flag(description: str) -> dict[str, Any]:
    """An optional boolean upload field, false unless set."""
    return {"type": "boolean", "default": False, "description": description}


# The fields a multipart upload and a JSON upload share: one definition, so the two
# request bodies cannot drift apart in the OpenAPI document.
_SHARED_UPLOAD_PROPERTIES: dict[str, Any] = {
    "public": _flag(PUBLIC_DESCRIPTION),
    "labelled": _flag(LABELLED_DESCRIPTION),
    "counts_public": _flag(COUNTS_PUBLIC_DESCRIPTION),
    "name": _NAME,
    "text_column": {**_BOUNDED, "default": "text"},
    "label_column": {**_BOUNDED, "default": "label"},
}
UPLOAD_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": (
                                "CSV/TSV with a header row, JSON lines, or a built-in "
                                "task's own format (e.g. TREC's train.txt with task=trec)."
                            ),
                        },
                        "task": {
                            "type": "string",
                            "minLength": 1,
                            "description": "Task name or spec JSON; required unless public.",
                        },
                        **_SHARED_UPLOAD_PROPERTIES,
                        "format": {"type": "string", "enum": ["csv", "tsv", "jsonl"]},
                    },
                }
            },
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["records"],
                    "properties": {
                        "task": {
                            "description": "Task name or spec object; required unless public.",
                            "anyOf": [{"type": "string", "minLength": 1}, {"type": "object"}],
                        },
                        **_SHARED_UPLOAD_PROPERTIES,
                        "records": {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "type": "object",
                                "description": "A record: the text column (default 'text') "
                                "is a string; the label column (default 'label') a string "
                                "or a number.",
                                "properties": {"text": {"type": "string"}},
                            },
                        },
                    },
                }
            },
        },
    }
}


class DatasetPublic(BaseModel):
    """Metadata only: a dataset's records are never returned."""

    id: str
    name: str
    kind: DatasetKind = Field(
        description="private (labelled, charged to its budget) or public (unlabelled texts "
        "for PromptPATE, never charged)."
    )
    task: dict[str, Any] = Field(description="The task spec ({} for a public one without).")
    label_counts: dict[str, int] = Field(
        description="Records per label (extraction tasks: all records under '*'; public "
        "datasets: none, unless labelled)."
    )
    labelled: bool = Field(
        False,
        description="Whether its records carry labels: always for a private dataset; for a "
        "public one, uploaded with labelled=true (it can then be a validation set).",
    )
    record_count: int
    counts_public: bool = Field(
        False,
        description="Private datasets: whether the data owner declared the per-label record "
        "counts public (jobs then plan with the exact counts and release none); false: every "
        "job releases the counts it plans with under DP. Always false for a public dataset.",
    )
    counts_public_at: Timestamp | None = Field(
        None,
        description="When the current counts_public setting was chosen (at upload, or by the "
        "last change); null: private by default, never changed.",
    )
    counts_public_by: str | None = Field(
        None, description="The ID of the API key that chose it (null as counts_public_at)."
    )
    created_at: Timestamp
    deleted_at: Timestamp | None

    @classmethod
    def from_row(cls, row: Dataset) -> DatasetPublic:
        return cls(
            id=row.id,
            name=row.name,
            kind=DatasetKind(row.kind),
            task=dict(row.task),
            label_counts={str(k): int(v) for k, v in row.label_counts.items()},
            labelled=row.kind == DatasetKind.PRIVATE or bool(row.label_counts),
            record_count=row.record_count,
            counts_public=bool(row.counts_public),
            counts_public_at=row.counts_public_at,
            counts_public_by=row.counts_public_by,
            created_at=row.created_at,
            deleted_at=row.deleted_at,
        )


class CountsPublicUpdate(_Request):
    """The owner's declaration that a private dataset's label counts are public, or its
    withdrawal (``PUT /v1/datasets/{id}/counts-public``)."""

    public: bool = Field(
        strict=True,
        description="true: declare the per-label record counts public (jobs admitted from now "
        "on plan with the exact counts and release none; paper accounting is allowed). false: "
        "withdraw it (jobs admitted from now on release their counts under DP again, and "
        "paper accounting is refused). Jobs already admitted keep what they were planned with.",
    )


# --- budgets --------------------------------------------------------------------------------


class BudgetUpdate(_Request):
    epsilon: Epsilon
    delta: Delta | None = Field(
        None,
        description=f"Default: unchanged; a new budget {DEFAULT_DELTA:g}, public and the same "
        "for every dataset (never derived from its size: every prompt carries its job's "
        "delta). A delta above 1/|D| of the dataset is accepted with a warning (delta_note).",
    )
    accounting: Accounting = Field(
        Accounting.TIGHT,
        description="tight: add/remove neighbours, Poisson sampling. paper: replace-one "
        "neighbours, fixed-size samples, which needs the dataset's counts declared public.",
    )
    warn_threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        strict=True,
        description="Share of the budget at which it is flagged (warn), in (0, 1]. Default: "
        "unchanged (0.8 for a new budget).",
    )


class LedgerEventPublic(BaseModel):
    kind: str = Field(
        description="reserve, commit or release (a job's charge), or counts (the dataset's "
        "count release, charged once: see BudgetPublic.count_releases)."
    )
    job_id: str = Field(
        description="The job the entry charges; for kind counts, the count release's ID "
        "(also in count_release_id), which names no job."
    )
    count_release_id: str | None = Field(
        None, description="For kind counts, the count release it charges; null otherwise."
    )
    epsilon: float
    delta: float
    created_at: Timestamp
    event: dict[str, Any]
    reason: str | None = Field(
        None,
        description="A commit's or release's reason in plain words (why the job was charged "
        "or its reservation given back); null for a reserve and a count release.",
    )

    @classmethod
    def from_row(cls, row: LedgerEntry) -> LedgerEventPublic:
        event = dict(row.event)
        reason = event.pop(REASON_KEY, None)
        return cls(
            kind=row.kind,
            job_id=row.job_id,
            count_release_id=row.job_id if row.kind == LedgerKind.COUNTS else None,
            epsilon=row.epsilon,
            delta=row.delta,
            created_at=row.created_at,
            event=event,
            reason=str(reason) if reason is not None else None,
        )


class CountReleasePublic(BaseModel):
    """One release of the dataset's per-label record counts: drawn once for one version of
    its records, when a plan first needed them, and charged once to the budget as its own
    ledger entry (kind counts); every quote, refusal and job of those records reads it.
    Its released values are not shown: its noise and cost are."""

    id: str
    epsilon: float = Field(description="What it costs under the budget's accounting.")
    delta: float = Field(description="The share of the budget's delta it took.")
    sigma: float = Field(description="Its noise multiplier (per label count, sensitivity 1).")
    share: float = Field(description="epsilon / the budget's epsilon.")
    labels: list[str] = Field(description="The labels whose counts it released.")
    current: bool = Field(
        description="It is the release of the dataset's records as they are now (false: of "
        "records since changed; a new release was, or will be, charged for them)."
    )
    created_at: Timestamp

    @classmethod
    def from_view(cls, release: CountReleaseView, budget_epsilon: float) -> CountReleasePublic:
        return cls(
            id=release.id,
            epsilon=release.epsilon,
            delta=release.delta,
            sigma=release.sigma,
            share=release.epsilon / budget_epsilon if budget_epsilon > 0 else 0.0,
            labels=list(release.labels),
            current=release.current,
            created_at=release.created_at,
        )


class LabelGroupPublic(BaseModel):
    """One label group's composed spend (see ``BudgetPublic.label_groups``)."""

    labels: list[str] = Field(
        description="The label partition (two labels: a pair, under replace-one neighbours; "
        "none: every record, when the dataset lists no labels)."
    )
    spent: float = Field(description="Composition of the live jobs that read this group.")
    remaining: float
    jobs: int = Field(description="Live jobs that charged this group.")
    binding: bool = Field(description="This group sets the dataset's spend (the largest).")

    @classmethod
    def from_group(cls, group: GroupSpend, budget_epsilon: float) -> LabelGroupPublic:
        return cls(
            labels=list(group.labels),
            spent=group.epsilon,
            remaining=max(0.0, budget_epsilon - group.epsilon),
            jobs=group.jobs,
            binding=group.binding,
        )


class BudgetPublic(BaseModel):
    dataset_id: str
    epsilon: float = Field(description="Total budget.")
    delta: float = Field(
        description="The delta every job of this budget is charged at (a job may ask for a "
        "smaller one); public: every prompt carries its job's delta."
    )
    delta_source: DeltaSource = Field(
        description="Where the delta comes from: default (the public default, the same for "
        "every dataset), owner (set by the data owner), or former_default (1/|D| of this "
        "dataset, the default of budgets set before issue 32; prompts at it tell their "
        "readers the dataset's size)."
    )
    delta_note: str | None = Field(
        None,
        description="A warning for the owner about the delta, in plain words (above 1/|D| of "
        "this dataset, or equal to it); null when there is none.",
    )
    accounting: Accounting
    accounting_note: str | None = Field(
        None,
        description="A warning about the accounting (paper accounting on a dataset whose "
        "counts are not declared public: its jobs are refused); null when there is none.",
    )
    spent: float = Field(
        description="The dataset's spend: its count releases' epsilon plus the composition "
        "of its live jobs by the accountant, at delta less the releases'."
    )
    plain_sum: float = Field(
        description="Sum of the live jobs' own epsilons and the count releases'."
    )
    counts_epsilon: float = Field(
        0.0,
        description="The count releases' part of spent (and of plain_sum): charged once for "
        "the dataset, not by any job; 0 when none was drawn (counts declared public, or no "
        "job planned yet).",
    )
    count_releases: list[CountReleasePublic] = Field(
        default_factory=list,
        description="The dataset's count releases, oldest first: one per version of its "
        "records that a plan needed (empty for counts declared public, and for ledgers "
        "written before releases were charged once).",
    )
    remaining: float
    live_jobs: int
    warn_threshold: float = Field(description="Share of the budget at which it is flagged.")
    spent_fraction: float = Field(description="spent / epsilon.")
    level: SpendLevel = Field(
        description="ok (below the threshold), warn (at or past it), over (the budget is used up)."
    )
    label_groups: list[LabelGroupPublic] = Field(
        description="Each label's records are priced apart: the spend of each label group "
        "(and, under replace-one, of the binding pair); the dataset's spend is the largest."
    )
    updated_at: Timestamp
    history: list[LedgerEventPublic]

    @classmethod
    def from_view(cls, view: BudgetView) -> BudgetPublic:
        total = view.budget.epsilon
        return cls(
            dataset_id=view.budget.dataset_id,
            epsilon=total,
            delta=view.budget.delta,
            delta_source=view.delta_source,
            delta_note=view.delta_note,
            accounting=Accounting(view.budget.accounting),
            accounting_note=view.accounting_note,
            spent=view.spend.epsilon,
            plain_sum=view.spend.plain_sum,
            counts_epsilon=view.spend.counts_epsilon,
            count_releases=[CountReleasePublic.from_view(r, total) for r in view.releases],
            remaining=view.remaining,
            live_jobs=view.spend.jobs,
            warn_threshold=view.budget.warn_threshold,
            spent_fraction=view.fraction,
            level=view.level,
            label_groups=[
                LabelGroupPublic.from_group(g, total) for g in display_groups(view.groups)
            ],
            updated_at=view.budget.updated_at,
            history=[LedgerEventPublic.from_row(e) for e in view.history],
        )


class BudgetSummary(BaseModel):
    """A budgeted dataset's spend against its threshold (``GET /v1/budgets``)."""

    dataset_id: str
    name: str
    epsilon: float
    spent: float
    counts_epsilon: float = Field(
        0.0, description="The count releases' part of spent (charged once for the dataset)."
    )
    remaining: float
    spent_fraction: float
    warn_threshold: float
    level: SpendLevel
    live_jobs: int
    # Issue 34: whose dataset (every row has them; an org:read key's rows span tenants).
    tenant_id: str | None = Field(None, description="The dataset's tenant.")
    tenant_name: str | None = Field(None, description="The dataset's tenant's name.")

    @classmethod
    def from_row(cls, row: DatasetSpend, tenant_name: str | None = None) -> BudgetSummary:
        assert row.budget is not None and row.spend is not None  # budgeted rows only
        return cls(
            dataset_id=row.dataset.id,
            name=row.dataset.name,
            epsilon=row.budget.epsilon,
            spent=row.spend.epsilon,
            counts_epsilon=row.spend.counts_epsilon,
            remaining=row.remaining or 0.0,
            spent_fraction=row.fraction or 0.0,
            warn_threshold=row.budget.warn_threshold,
            level=row.level or SpendLevel.OK,
            live_jobs=row.spend.jobs,
            tenant_id=row.dataset.tenant_id,
            tenant_name=tenant_name,
        )


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


class JobParams(BaseModel):
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

    dataset_id: ResourceId = Field(
        description="The private dataset the job reads and is charged to."
    )
    method: RegisteredMethod = Field(
        DEFAULT_METHOD, description="A registered method (app.methods)."
    )
    public_dataset_id: ResourceId | None = Field(
        None, description="For a method that reads a public dataset."
    )
    validation_dataset_id: ResourceId | None = Field(
        None,
        description="A public labelled dataset (uploaded with public=true and labelled=true) "
        "of the same task labels: once the prompt is stored, it is scored on up to "
        "VALIDATION_MAX_RECORDS of its records (the prompt's validation). Post-processing of "
        "the DP output on public data: never charged.",
    )
    epsilon: Epsilon = Field(description="Target epsilon of this job; noise is calibrated to it.")
    delta: Delta | None = Field(None, description="Default: the budget's delta.")
    shots: int | None = Field(
        None,
        strict=True,
        ge=1,
        le=MAX_SHOTS,
        description=f"Default: one per label for a task of at most {COVER_EVERY_LABEL_UP_TO} "
        f"labels (at least {DEFAULT_SHOTS}), else {DEFAULT_SHOTS}.",
    )
    accounting: Accounting | None = Field(None, description="Must be the budget's (default).")
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


class ProgressPublic(BaseModel):
    """Units of the job's method done, out of those planned."""

    done: int = Field(
        description="Units done; a succeeded job's equals its total (it is complete, even "
        "when its method stopped before the planned total: progress_note says where)."
    )
    total: int
    unit: str = Field(description="What the method counts (tokens, public inputs, steps, ...).")


def _job_public_schema(schema: dict[str, Any]) -> None:
    """What each registered method's public stats hold."""
    stats = _by_text({n: m.public_stats_help for n, m in METHODS.items() if m.public_stats_help})
    schema["properties"]["stats"]["description"] = (
        f"Once succeeded, the method's public stats: DP outputs or public settings only. {stats}"
    )


class GroupQuote(BaseModel):
    """One label group's composed spend before and after the quoted job."""

    labels: list[str] = Field(description="The group's labels (empty: every record).")
    before: float
    after: float
    charged: bool = Field(description="The job adds to this group's spend.")
    binding_before: bool = Field(description="This group set the dataset's spend before.")
    binding_after: bool = Field(description="This group sets it if the job is admitted.")

    @classmethod
    def from_change(cls, change: GroupChange) -> GroupQuote:
        # Same names as the service's value: read them off it (charged is its property).
        return cls.model_validate(change, from_attributes=True)


class JobQuote(BaseModel):
    """What a job would cost if submitted now (``POST /v1/jobs/quote``): nothing reserved.
    The dataset's spend is composed by its accountant, so ``spent_after - spent`` may be less
    than the job's own ``epsilon`` (or 0, when it charges labels other than the binding
    group's); ``plain_sum_after`` is what a plain sum of epsilons would say."""

    dataset_id: str
    epsilon: float = Field(description="The job's own epsilon, what the ledger would reserve.")
    delta: float
    budget: float = Field(description="The dataset's total epsilon.")
    spent: float = Field(description="The dataset's composed spend now.")
    spent_after: float = Field(description="Its composed spend were the job admitted now.")
    plain_sum: float
    plain_sum_after: float
    fits: bool = Field(description="spent_after is within the budget: it would be admitted.")
    groups: list[GroupQuote] = Field(description="Per label group, where groups are priced.")
    noise: dict[str, float] = Field(
        default_factory=dict,
        description="Each label's noise multiplier (sigma) as the job would be planned: each "
        "label is calibrated to its own released size (token-loop methods; empty for others).",
    )
    counts_epsilon: float = Field(
        0.0,
        description="The dataset's count release's part of spent and spent_after: charged "
        "once for the dataset (when its first plan needed the counts), never again by a job.",
    )

    @classmethod
    def from_quote(cls, dataset_id: str, quote: Quote, groups: list[GroupChange]) -> JobQuote:
        return cls(
            dataset_id=dataset_id,
            epsilon=quote.epsilon,
            delta=quote.delta,
            budget=quote.budget_epsilon,
            spent=quote.spend_now.epsilon,
            spent_after=quote.spend_after.epsilon,
            plain_sum=quote.spend_now.plain_sum,
            plain_sum_after=quote.spend_after.plain_sum,
            fits=quote.fits,
            groups=[GroupQuote.from_change(g) for g in groups],
            noise=dict(quote.noise),
            counts_epsilon=quote.spend_now.counts_epsilon,
        )


class JobPublic(BaseModel):
    model_config = ConfigDict(json_schema_extra=_job_public_schema)

    id: str
    dataset_id: str
    dataset_name: str | None = Field(None, description="The dataset's name (public metadata).")
    public_dataset_id: str | None = Field(
        description="The public dataset of a method that reads one."
    )
    validation_dataset_id: str | None = Field(
        None, description="The public labelled dataset its prompt is scored on (or null)."
    )
    submitted_by: str | None = Field(
        None,
        description="The ID of the API key that submitted it (null: submitted before it "
        "was recorded, or outside the API).",
    )
    method: str
    status: str
    progress: ProgressPublic
    epsilon: float = Field(description="What the ledger charges for this job.")
    epsilon_asked: float | None = Field(
        None,
        description="The epsilon the job was asked for (its planned noise costs ``epsilon``, "
        "at most this); None where the stored config does not keep it.",
    )
    delta: float = Field(description="The job's delta: the budget's, or the smaller one asked.")
    accounting: str | None
    counts: CountsMode | None = Field(
        None,
        description="How the job knew the dataset's per-label record counts: released (from "
        "the dataset's count release, charged once to its budget: count_release_id; jobs "
        "planned before issue 41 released and charged their own, inside their event) or "
        "declared_public (the owner's opt-in on the dataset when the job was admitted); null: "
        "the method reads no counts, or the job was planned before counts were private "
        "(issue 32).",
    )
    count_release_id: str | None = Field(
        None,
        description="The dataset's count release the job was planned from (its ledger entry "
        "is of kind counts); null: none (declared public, a method that reads no counts, or "
        "a job planned before issue 41).",
    )
    noise: dict[str, float] = Field(
        default_factory=dict,
        description="Each label's noise multiplier (sigma), as the job's plan calibrated it "
        "to the label's own released size (token-loop methods); empty for other methods and "
        "for jobs planned before labels had their own noise (issue 41).",
    )
    shots: int
    progress_note: str | None = Field(
        description="Why a succeeded job stopped before its planned total (PromptPATE stops "
        "when its privacy budget is spent), with how far it got: the run is complete (its "
        "progress reads total/total); null otherwise."
    )
    cancel_requested: bool
    read_private_data: bool = Field(
        description="Whether the worker has marked the job as reading the private records "
        "(set, and committed, before its first read): from then on it is charged however it "
        "ends."
    )
    charge: ChargeState | None = Field(
        description="The ledger's state of the job's charge: reserved (held while it runs), "
        "charged (final) or released (given back: it never read a private record)."
    )
    charged_epsilon: float = Field(
        description="The epsilon this job counts against the budget now: its own epsilon "
        "while reserved or once charged, 0 once released."
    )
    charge_note: str = Field(description="Why it is charged, reserved or released, in words.")
    params: dict[str, Any] = Field(
        description="The method's parameters the job runs with (null: decided by the "
        "planner or the task)."
    )
    error: str | None
    prompt_id: str | None
    stats: dict[str, float | int | bool] | None
    settings: str | None = Field(
        description="The settings the job runs with, one line naming those left at their "
        "default; null if its method shows none."
    )
    summary: str | None = Field(
        description="A phrase about the finished job from its public stats; null if none."
    )
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
        note = None
        if method is not None and stats and row.status == "succeeded":
            note = method.progress_note(stats, row.progress_done, row.progress_total)
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
            summary=method.stats_summary(stats) if method and stats else None,
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


# --- prompts --------------------------------------------------------------------------------


class DemonstrationPublic(BaseModel):
    label: str
    text: str


class SoftPromptPublic(BaseModel):
    """A PromptDPSGD soft prompt: ``length`` input embeddings of ``hidden`` values, trained
    for ``model`` (``/complete`` refuses it on a server running another model)."""

    model: str
    length: int = Field(description="Number of soft tokens (rows of the embedding matrix).")
    hidden: int = Field(description="The model's hidden size (columns).")
    sha256: str = Field(description="SHA-256 of the safetensors file the download returns.")
    download_url: str = Field(description="Path of the safetensors file (same key).")

    @classmethod
    def from_row(cls, row: PromptSet) -> SoftPromptPublic | None:
        # Reads the metadata columns only: the bytes are a deferred column, never loaded here.
        if row.soft_prompt_sha256 is None:
            return None
        assert row.soft_prompt_length is not None and row.soft_prompt_hidden is not None
        return cls(
            model=row.model,
            length=row.soft_prompt_length,
            hidden=row.soft_prompt_hidden,
            sha256=row.soft_prompt_sha256,
            download_url=f"/v1/prompts/{row.id}/soft-prompt",
        )


class PromptSummary(BaseModel):
    id: str
    job_id: str
    dataset_id: str
    task: str
    method: str
    model: str
    epsilon: float
    delta: float
    created_at: Timestamp
    soft_prompt: SoftPromptPublic | None = Field(
        description="promptdpsgd: the trained soft prompt's metadata and download path; "
        "null for prompts made of demonstrations."
    )
    dataset_name: str | None = Field(
        None, description="The name of the dataset it was synthesised from (public metadata)."
    )
    validation_accuracy: float | None = Field(
        None,
        description="Its accuracy on its job's validation set (null: none named, pending or "
        "not scored); the prompt's validation has the baselines.",
    )
    beats_zero_shot: bool | None = Field(
        None,
        description="Whether that accuracy is above zero-shot's on the same records (null: "
        "no score, or scored before baselines were kept).",
    )

    @classmethod
    def from_row(cls, row: PromptSet, dataset_name: str | None = None) -> PromptSummary:
        scored = row.validation or {}
        accuracy = scored.get("accuracy")
        zero = (scored.get("baselines") or {}).get("zero_shot")
        return cls(
            validation_accuracy=accuracy,
            beats_zero_shot=None if accuracy is None or zero is None else accuracy > zero,
            id=row.id,
            job_id=row.job_id,
            dataset_id=row.dataset_id,
            dataset_name=dataset_name,
            task=str(row.task.get("name", "")),
            method=row.method,
            model=row.model,
            epsilon=row.epsilon,
            delta=row.delta,
            created_at=row.created_at,
            soft_prompt=SoftPromptPublic.from_row(row),
        )


class ValidationBaselines(BaseModel):
    """What a prompt must beat on its validation records: public inputs only, no cost."""

    zero_shot: float = Field(
        description="Accuracy of the instruction alone (no demonstrations, plain model)."
    )
    majority: float | None = Field(
        None, description="Accuracy of always answering the most frequent label (classification)."
    )
    majority_label: str | None = Field(None, description="That label.")
    zero_shot_calibrated: float | None = Field(
        None, description="Zero-shot with contextual calibration (classification)."
    )

    def calibrated(self) -> ValidationBaselines | None:
        """The baselines a calibrated accuracy is held to (the majority label needs none)."""
        if self.zero_shot_calibrated is None:
            return None
        return self.model_copy(update={"zero_shot": self.zero_shot_calibrated})


def validation_verdict(
    accuracy: float, baselines: ValidationBaselines, n: int | None = None
) -> str:
    """The prompt's score against its baselines, in plain words (the API, the CLI and the
    dashboard say the same). With ``n``, the records scored, a lead within two standard
    errors of the accuracy (binomial over the records) is "cannot tell", with the number of
    records that would tell a lead of that size (issue 43: "beats ... (+0.021)" was said of
    one record's difference out of 48)."""
    best = max(baselines.zero_shot, baselines.majority or 0.0)
    name = "zero-shot" if best == baselines.zero_shot else "the majority label"
    lead = accuracy - best
    if lead > 0 and n:
        variance = max(accuracy * (1.0 - accuracy), 1.0 / n)
        margin = 2.0 * math.sqrt(variance / n)
        if lead <= margin:
            needed = math.ceil(4.0 * variance / lead**2)
            return (
                f"cannot tell on {n} records: ahead of {name} by {lead:+.3f}, within the "
                f"±{margin:.3f} that {n} records allow; about {needed} records would tell a "
                "lead of this size"
            )
    if lead > 0:
        return f"beats zero-shot and the majority label (by {lead:+.3f} over {name})"
    if accuracy < baselines.zero_shot:
        return (
            f"does not beat zero-shot ({accuracy:.3f} against {baselines.zero_shot:.3f}): the "
            "instruction alone answers these records better than this prompt"
        )
    return f"does not beat {name} ({accuracy:.3f} against {best:.3f})"


class ValidationPublic(BaseModel):
    """The prompt's score on its job's validation set (public labelled records, scored after
    the prompt was stored; post-processing, never charged)."""

    dataset_id: str = Field(description="The public labelled dataset it was scored on.")
    status: Literal["pending", "scored", "not_scored"] = Field(
        description="pending: stored, not scored yet (the next read may have the score); "
        "scored: n and accuracy; not_scored: reason."
    )
    n: int | None = Field(None, description="Records scored (at most VALIDATION_MAX_RECORDS).")
    accuracy: float | None = Field(
        None, description="Share of them answered right, by the scorer /complete answers with."
    )
    calibrated_accuracy: float | None = Field(
        None,
        description="Classification: the same with contextual calibration, as /complete "
        "answers with calibrated=true (null: scored before it was kept).",
    )
    reason: str | None = Field(None, description="Why it was not scored (names no record).")
    baselines: ValidationBaselines | None = Field(
        None,
        description="What the prompt must beat on the same records (null: not scored, or "
        "scored before baselines were kept).",
    )
    verdict: str | None = Field(
        None,
        description="The score against the baselines in plain words, e.g. that the prompt "
        "does not beat zero-shot (null when there are no baselines).",
    )
    calibrated_verdict: str | None = Field(
        None,
        description="The calibrated accuracy against calibrated zero-shot and the majority "
        "label, in the same words (null without both).",
    )

    @model_validator(mode="after")
    def _say_it(self) -> ValidationPublic:
        if self.verdict is None and self.baselines is not None and self.accuracy is not None:
            self.verdict = validation_verdict(self.accuracy, self.baselines, self.n)
        calibrated = self.baselines.calibrated() if self.baselines is not None else None
        if self.calibrated_verdict is None and calibrated and self.calibrated_accuracy is not None:
            self.calibrated_verdict = validation_verdict(
                self.calibrated_accuracy, calibrated, self.n
            )
        return self


class PromptPublic(PromptSummary):
    """A synthesised prompt: a differentially private output, safe to share."""

    task_spec: dict[str, Any]
    demonstrations: list[DemonstrationPublic]
    prompt: str
    validation: ValidationPublic | None = Field(
        None, description="Its score on the job's validation set; null if the job named none."
    )
    notes: list[str] = Field(
        default_factory=list,
        description="Plain sentences on how the prompt differs from what its job planned, "
        "e.g. demonstrations that came out empty and were left out, and labels it then does "
        "not demonstrate; functions of DP outputs and public settings only. Empty: nothing to "
        "note.",
    )

    @classmethod
    def from_row(
        cls, row: PromptSet, dataset_name: str | None = None, notes: Sequence[str] = ()
    ) -> PromptPublic:
        """``notes``: :func:`app.services.prompts.prompt_notes` of the row."""
        return cls(
            **dict(PromptSummary.from_row(row, dataset_name)),
            task_spec=dict(row.task),
            demonstrations=[DemonstrationPublic(**d) for d in row.demonstrations],
            prompt=row.prompt,
            validation=ValidationPublic(**row.validation) if row.validation else None,
            notes=list(notes),
        )


class PromptFormat(StrEnum):
    """How ``GET /v1/prompts/{id}`` answers: the prompt's JSON, or its chat messages."""

    TEXT = "text"
    MESSAGES = "messages"


PromptFormatQuery = Annotated[
    PromptFormat,
    Query(
        alias="format",
        description="text (default): the prompt's JSON, its text in `prompt`. messages: the "
        "prompt as chat messages for OpenAI-compatible chat APIs (the ICL instruction as the "
        "system message, each demonstration as a user turn answered by an assistant turn); "
        "a soft prompt (promptdpsgd) has none: 409 no_chat_form.",
    ),
]


class ChatMessagePublic(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class PromptMessagesPublic(BaseModel):
    """A prompt as chat messages (``?format=messages``): append the user's query as a last
    ``user`` message, in the demonstrations' form (``{text_field}: {query}``), and send them
    to a chat model; its reply is the label's word (or the extracted value)."""

    prompt_id: str
    messages: list[ChatMessagePublic]


class CompletionRequest(_Request):
    stored: ClassVar[bool] = False
    query: str = Field(min_length=1, max_length=20_000, description="Never stored or logged.")
    calibrated: bool = Field(
        False,
        description="Classification: divide the label scores by the prompt's scores for "
        "content-free inputs ('N/A', '', '[MASK]') and renormalise (contextual calibration, "
        "no privacy cost). Often much better on a small model; a 422 for extraction.",
    )


class CompletionPublic(BaseModel):
    """Classification: ``label`` and ``scores`` (a distribution over the labels), and
    ``calibration`` saying whether they were calibrated. Extraction: ``value``."""

    prompt_id: str
    kind: str
    label: str | None = None
    scores: dict[str, float] | None = None
    calibration: str | None = Field(
        None, description="Classification: 'contextual' (calibrated) or 'none'."
    )
    value: str | None = None


# --- keys -----------------------------------------------------------------------------------


class KeyCreate(_Request):
    scope: KeyScope = Field(
        KeyScope.PROMPTS_READ,
        description="admin or prompts:read; org:read keys are created by the operator only "
        "(a 403 here).",
    )
    name: str | None = Field(
        None,
        description=f"What the key is for (trimmed; 1 to {KEY_NAME_MAX_CHARS} printable "
        "characters). Shown in key lists; optional.",
        json_schema_extra={"maxLength": KEY_NAME_MAX_CHARS},
    )

    @field_validator("name")
    @classmethod
    def _trimmed_name(cls, value: str | None) -> str | None:
        """Trimmed, and refused with the rule (never the value) if blank, too long for its
        column, or holding a control character."""
        if value is None:
            return None
        problem = key_name_problem(value.strip())
        if problem:
            raise ValueError(problem)
        return value.strip()


class KeyPublic(BaseModel):
    id: str
    scope: str
    created_at: Timestamp
    revoked: bool
    name: str | None = Field(None, description="The name given at creation (null: none).")
    last_used_at: Timestamp | None = Field(
        None,
        description="When the key last opened the API or the dashboard, to within a minute "
        "(written at most once a minute per key); null: not used since names were added.",
    )
    usage_requests: int = Field(
        0, description="Answers the key asked for through the OpenAI-compatible endpoint."
    )
    usage_prompt_tokens: int = Field(0, description="Their prompt tokens (the DP prompt's too).")
    usage_completion_tokens: int = Field(0, description="Their answers' tokens.")

    @classmethod
    def from_row(cls, row: ApiKey) -> KeyPublic:
        return cls.model_validate(row, from_attributes=True)


class KeyCreated(KeyPublic):
    key: str = Field(description="The raw key: shown only now, store it safely.")


# --- health ---------------------------------------------------------------------------------


class Health(BaseModel):
    status: Literal["ok"]
    database: Literal["reachable"]


# --- advice (issue 33) ----------------------------------------------------------------------


class AdviceCreate(BaseModel):
    """An advice run: the candidates to measure on a public labelled dataset of the tenant
    (app.eval.advice), before any budget is spent. Defaults as ``dpsyn advise``'s."""

    model_config = ConfigDict(extra="forbid")

    dataset_id: str = Field(max_length=32, description="A public labelled dataset.")
    methods: list[str] = Field(
        default_factory=lambda: ["adadpsyn", "tang"], min_length=1, max_length=8
    )
    shots: list[Annotated[int, Field(ge=1, le=64)]] = Field(
        default_factory=list, max_length=4, description="Empty: 4 and one per label."
    )
    epsilons: list[Annotated[float, Field(gt=0.0, allow_inf_nan=False)]] = Field(
        default_factory=lambda: [1.0, 4.0], min_length=1, max_length=4
    )
    seeds: int = Field(3, ge=1, le=5)
    queries: int = Field(100, ge=10, le=500, description="Held-out queries.")
    params: dict[str, Any] = Field(
        default_factory=dict,
        max_length=16,
        description="Method parameters by name, as a job's params (default: the quick "
        "profile's T_max 8 and K 50).",
    )

    def to_config(self) -> AdviceConfig:
        return AdviceConfig(
            methods=tuple(self.methods),
            shots=tuple(self.shots),
            epsilons=tuple(self.epsilons),
            seeds=self.seeds,
            test_size=self.queries,
            params=self.params,
        )


class AdvicePublic(BaseModel):
    """An advice run as stored: its request, progress in runs, and what it measured."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    dataset_id: str
    status: AdviceStatus
    progress_done: int
    progress_total: int
    config: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    created_at: datetime
    finished_at: datetime | None
