"""Dataset bodies: uploads (private and public), the dataset views, counts-public."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    model_validator,
)

from app.api.schemas.common import COLUMN_NAME_MAX_CHARS, Column, Name, Timestamp, _Request
from app.db.models import (
    Dataset,
    DatasetKind,
    RecordRead,
)
from app.documented import Documented
from app.services.record_reads import ReaderKind
from app.services.storable import DATASET_NAME_MAX_CHARS
from app.services.upload_checks import dataset_warnings

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

BUDGET_OF_DESCRIPTION = (
    "Private only. A dataset's ID (or unique name) whose budget and ledger the new dataset "
    "charges instead of a budget of its own: needed when some of its records were uploaded "
    "before (a 409 records_seen names the dataset to give). Always the root owner's budget; "
    "a dataset sharing no record with the upload may be named too (pooling budgets)."
)


class _UploadOptions(_Request):
    """The fields a JSON upload and a multipart upload share, declared once so that the
    two ways to upload accept the same options."""

    name: Name | None = None
    """Default: the task's name ('public')."""
    public: bool = Field(False, description=PUBLIC_DESCRIPTION)
    labelled: bool = Field(False, description=LABELLED_DESCRIPTION)
    counts_public: bool = Field(False, description=COUNTS_PUBLIC_DESCRIPTION)
    budget_of: str | None = Field(
        None, min_length=1, max_length=DATASET_NAME_MAX_CHARS, description=BUDGET_OF_DESCRIPTION
    )
    text_column: Column = "text"
    label_column: Column = "label"
    """Ignored for a public dataset unless labelled."""


class DatasetCreate(_UploadOptions):
    """A JSON upload. ``records`` are objects holding (at least) the two named columns (a
    public dataset: the text column)."""

    task: str | dict[str, Any] | None = None
    """A built-in task name (agnews, trec, trec14, sst2, mitg, mitd) or a custom task spec object
    (see TaskSpec: name, kind, instruction, icl_instruction, text_field, label_field, labels |
    slot and candidates, verbalisers). Required unless public."""
    records: list[dict[str, Any]] = Field(min_length=1)
    """Objects holding the text column (a string) and the label column."""

    @model_validator(mode="after")
    def _texts_are_strings(self) -> DatasetCreate:
        for i, record in enumerate(self.records):
            if self.text_column in record and not isinstance(record[self.text_column], str):
                column = self.text_column[:64]
                raise ValueError(f"records[{i}].{column}: the text must be a string")
        return self


class DatasetUploadForm(_UploadOptions):
    """The non-file fields of a multipart upload (the file is the part named ``file``)."""

    task: str | None = Field(None, min_length=1)
    """Built-in task name or a task spec as JSON. Required unless public."""
    format: Literal["csv", "tsv", "jsonl"] | None = None
    """Default: from the file name's extension."""


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
    "budget_of": {**_NAME, "description": BUDGET_OF_DESCRIPTION},
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


class DatasetPublic(Documented):
    """Metadata only: a dataset's records are never returned."""

    id: str
    name: str
    kind: DatasetKind
    """private (labelled, charged to its budget) or public (unlabelled texts for PromptPATE,
    never charged)."""
    task: dict[str, Any]
    """The task spec ({} for a public one without)."""
    label_counts: dict[str, int]
    """Records per label (extraction tasks: all records under '*'; public datasets: none, unless
    labelled)."""
    labelled: bool = False
    """Whether its records carry labels: always for a private dataset; for a public one, uploaded
    with labelled=true (it can then be a validation set)."""
    record_count: int
    counts_public: bool = False
    """Private datasets: whether the data owner declared the per-label record counts public (jobs
    then plan with the exact counts and release none); false: every job releases the counts it
    plans with under DP. Always false for a public dataset."""
    counts_public_at: Timestamp | None = None
    """When the current counts_public setting was chosen (at upload, or by the last change);
    null: private by default, never changed."""
    counts_public_by: str | None = None
    """The ID of the API key that chose it (null as counts_public_at)."""
    budget_dataset_id: str | None = None
    """The dataset whose budget and ledger this one charges (linked at upload with
    budget_of, because its records had been uploaded before); null: its own budget."""
    created_at: Timestamp
    deleted_at: Timestamp | None
    records_dropped_at: Timestamp | None = None
    """When the retention setting (DPSYN_RECORD_RETENTION_DAYS) dropped the records and
    destroyed their data key, because no job had run on them for that long; its budget, ledger
    and prompts are kept, and a new job on it is refused (409 records_dropped). Null: kept."""
    warnings: list[str] = Field(default_factory=list)
    """What the labelled dataset lacks, said at upload and in every view (the data is kept):
    the task's labels without records, by name; a validation set whose records all carry
    one label. Never a record. Empty: nothing to say."""

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
            budget_dataset_id=row.budget_dataset_id,
            created_at=row.created_at,
            deleted_at=row.deleted_at,
            records_dropped_at=row.records_dropped_at,
            warnings=dataset_warnings(row.task, row.label_counts),
        )


class RecordReadPublic(Documented):
    """One read of the dataset's records (``GET /v1/datasets/{id}/reads``): who read, from
    which process, how many records, when. Never a record."""

    dataset_id: str
    reader_kind: ReaderKind
    """job: a job's worker read them (its private dataset, or its public texts); advice: an
    advice run; validation: a job's prompt scored on its validation set."""
    reader_id: str
    """The job's ID (for job and validation) or the advice run's."""
    process: str
    """The process that read them: host:pid, then the attempt's lease token where it held
    one (as the job's lease names its worker)."""
    record_count: int
    """How many records it read."""
    read_at: Timestamp
    """When (recorded before the records were opened)."""

    @classmethod
    def from_row(cls, row: RecordRead) -> RecordReadPublic:
        return cls(
            dataset_id=row.dataset_id,
            reader_kind=ReaderKind(row.reader_kind),
            reader_id=row.reader_id,
            process=row.process,
            record_count=row.record_count,
            read_at=row.read_at,
        )


class CountsPublicUpdate(_Request):
    """The owner's declaration that a private dataset's label counts are public, or its
    withdrawal (``PUT /v1/datasets/{id}/counts-public``)."""

    public: bool = Field(strict=True)
    """true: declare the per-label record counts public (jobs admitted from now on plan with the
    exact counts and release none; paper accounting is allowed). false: withdraw it (jobs
    admitted from now on release their counts under DP again, and paper accounting is
    refused). Jobs already admitted keep what they were planned with."""
