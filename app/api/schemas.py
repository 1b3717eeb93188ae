"""Request and response bodies. Responses are built field by field from rows
(``from_row``), so an ORM row is never returned and private records never appear.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.db.models import ApiKey, Dataset, Job, KeyScope, LedgerEntry, PromptSet
from app.privacy.accounting import Accounting
from app.privacy.params import Method
from app.services.budgets import BudgetView


def _utc(value: datetime) -> datetime:
    # SQLite returns naive datetimes; every timestamp the service writes is UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Timestamp = Annotated[datetime, AfterValidator(_utc)]
Epsilon = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Delta = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=200)]
Column = Annotated[str, Field(min_length=1, max_length=200)]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


# --- datasets -------------------------------------------------------------------------------


class DatasetCreate(_Request):
    """A JSON upload. ``records`` are objects holding (at least) the two named columns."""

    name: Name | None = Field(None, description="Default: the task's name.")
    task: str | dict[str, Any] = Field(
        description="A built-in task name (agnews, trec, sst2, mitg, mitd) or a custom task "
        "spec object (see TaskSpec: name, kind, instruction, icl_instruction, text_field, "
        "label_field, labels | slot and candidates, verbalisers)."
    )
    text_column: Column = "text"
    label_column: Column = "label"
    records: list[dict[str, Any]] = Field(min_length=1)


class DatasetUploadForm(_Request):
    """The non-file fields of a multipart upload (the file is the part named ``file``)."""

    name: Name | None = None
    task: str = Field(min_length=1, description="Built-in task name or a task spec as JSON.")
    text_column: Column = "text"
    label_column: Column = "label"
    format: Literal["csv", "tsv", "jsonl"] | None = Field(
        None, description="Default: from the file name's extension."
    )


UPLOAD_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "task"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "CSV/TSV with a header row, or JSON lines.",
                        },
                        "task": {"type": "string", "description": "Task name or spec JSON."},
                        "name": {"type": "string"},
                        "text_column": {"type": "string", "default": "text"},
                        "label_column": {"type": "string", "default": "label"},
                        "format": {"type": "string", "enum": ["csv", "tsv", "jsonl"]},
                    },
                }
            },
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["task", "records"],
                    "properties": {
                        "task": {
                            "description": "Task name or spec object.",
                            "anyOf": [{"type": "string"}, {"type": "object"}],
                        },
                        "name": {"type": "string"},
                        "text_column": {"type": "string", "default": "text"},
                        "label_column": {"type": "string", "default": "label"},
                        "records": {"type": "array", "items": {"type": "object"}},
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
    task: dict[str, Any]
    label_counts: dict[str, int] = Field(
        description="Records per label (extraction tasks: all records under '*')."
    )
    record_count: int
    created_at: Timestamp
    deleted_at: Timestamp | None

    @classmethod
    def from_row(cls, row: Dataset) -> DatasetPublic:
        return cls(
            id=row.id,
            name=row.name,
            task=dict(row.task),
            label_counts={str(k): int(v) for k, v in row.label_counts.items()},
            record_count=row.record_count,
            created_at=row.created_at,
            deleted_at=row.deleted_at,
        )


# --- budgets --------------------------------------------------------------------------------


class BudgetUpdate(_Request):
    epsilon: Epsilon
    delta: Delta | None = Field(None, description="Default: 1/record_count.")
    accounting: Accounting = Accounting.TIGHT


class LedgerEventPublic(BaseModel):
    kind: str
    job_id: str
    epsilon: float
    delta: float
    created_at: Timestamp
    event: dict[str, Any]

    @classmethod
    def from_row(cls, row: LedgerEntry) -> LedgerEventPublic:
        return cls(
            kind=row.kind,
            job_id=row.job_id,
            epsilon=row.epsilon,
            delta=row.delta,
            created_at=row.created_at,
            event=dict(row.event),
        )


class BudgetPublic(BaseModel):
    dataset_id: str
    epsilon: float = Field(description="Total budget.")
    delta: float
    accounting: Accounting
    spent: float = Field(description="Composition of live jobs by the accountant, at delta.")
    plain_sum: float = Field(description="Sum of the live jobs' own epsilons.")
    remaining: float
    live_jobs: int
    updated_at: Timestamp
    history: list[LedgerEventPublic]

    @classmethod
    def from_view(cls, view: BudgetView) -> BudgetPublic:
        return cls(
            dataset_id=view.budget.dataset_id,
            epsilon=view.budget.epsilon,
            delta=view.budget.delta,
            accounting=Accounting(view.budget.accounting),
            spent=view.spend.epsilon,
            plain_sum=view.spend.plain_sum,
            remaining=view.remaining,
            live_jobs=view.spend.jobs,
            updated_at=view.budget.updated_at,
            history=[LedgerEventPublic.from_row(e) for e in view.history],
        )


# --- jobs -----------------------------------------------------------------------------------


class JobParams(_Request):
    """Method parameters; unset ones take the task's defaults (the papers' settings)."""

    M: int | None = Field(None, description="Teacher subsets per token.")
    N: int | None = Field(None, description="Records per teacher subset.")
    tmax: int | None = Field(None, description="Maximum tokens per demonstration.")
    K: int | None = Field(None, description="Public vocabulary size per token.")
    sigma0: float | None = Field(None, description="AdaDPSyn GoodRadius noise multiplier.")
    sigma2: float | None = Field(None, description="AdaDPSyn coverage-check noise multiplier.")
    T: int | None = Field(None, description="AdaDPSyn rounds of radius reduction.")
    lam: float | None = Field(None, description="AdaDPSyn noise margin factor lambda.")


class JobCreate(_Request):
    dataset_id: str
    method: Method = Method.ADADPSYN
    epsilon: Epsilon = Field(description="Target epsilon of this job; noise is calibrated to it.")
    delta: Delta | None = Field(None, description="Default: the budget's delta.")
    shots: int = Field(4, ge=1, le=64, description="Demonstrations to generate.")
    accounting: Accounting | None = Field(None, description="Must be the budget's (default).")
    params: JobParams | None = None


class Progress(BaseModel):
    done: int
    total: int


class JobPublic(BaseModel):
    id: str
    dataset_id: str
    method: str
    status: str
    progress: Progress
    epsilon: float = Field(description="What the ledger charges for this job.")
    delta: float
    accounting: str | None
    shots: int
    cancel_requested: bool
    error: str | None
    prompt_id: str | None
    created_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None

    @classmethod
    def from_row(cls, row: Job) -> JobPublic:
        synthesis = (row.config or {}).get("synthesis", {})
        return cls(
            id=row.id,
            dataset_id=row.dataset_id,
            method=row.method,
            status=row.status,
            progress=Progress(done=row.progress_done, total=row.progress_total),
            epsilon=row.epsilon,
            delta=row.delta,
            accounting=synthesis.get("accounting"),
            shots=len(row.schedule),
            cancel_requested=row.cancel_requested,
            error=row.error,
            prompt_id=row.prompt_set_id,
            created_at=row.created_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
        )


# --- prompts --------------------------------------------------------------------------------


class Demonstration(BaseModel):
    label: str
    text: str


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

    @classmethod
    def from_row(cls, row: PromptSet) -> PromptSummary:
        return cls(
            id=row.id,
            job_id=row.job_id,
            dataset_id=row.dataset_id,
            task=str(row.task.get("name", "")),
            method=row.method,
            model=row.model,
            epsilon=row.epsilon,
            delta=row.delta,
            created_at=row.created_at,
        )


class PromptPublic(PromptSummary):
    """A synthesised prompt: a differentially private output, safe to share."""

    task_spec: dict[str, Any]
    demonstrations: list[Demonstration]
    prompt: str

    @classmethod
    def from_row(cls, row: PromptSet) -> PromptPublic:
        return cls(
            **PromptSummary.from_row(row).model_dump(),
            task_spec=dict(row.task),
            demonstrations=[Demonstration(**d) for d in row.demonstrations],
            prompt=row.prompt,
        )


class CompletionRequest(_Request):
    query: str = Field(min_length=1, max_length=20_000, description="Never stored or logged.")


class CompletionPublic(BaseModel):
    """Classification: ``label`` and ``scores`` (a distribution over the labels).
    Extraction: ``value``."""

    prompt_id: str
    kind: str
    label: str | None = None
    scores: dict[str, float] | None = None
    value: str | None = None


# --- keys -----------------------------------------------------------------------------------


class KeyCreate(_Request):
    scope: KeyScope = KeyScope.PROMPTS_READ


class KeyPublic(BaseModel):
    id: str
    scope: str
    created_at: Timestamp
    revoked: bool

    @classmethod
    def from_row(cls, row: ApiKey) -> KeyPublic:
        return cls(id=row.id, scope=row.scope, created_at=row.created_at, revoked=row.revoked)


class KeyCreated(KeyPublic):
    key: str = Field(description="The raw key: shown only now, store it safely.")


# --- health ---------------------------------------------------------------------------------


class Health(BaseModel):
    status: Literal["ok"]
    database: Literal["reachable"]
