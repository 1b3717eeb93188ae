"""Tables of the service.

Private records live only in ``dataset_records``; no API schema ever reads that table, and
deleting a dataset deletes its records but keeps its ledger. The ledger is append-only: rows
are inserted, never updated or deleted.

A dataset is ``private`` (labelled records, charged against its budget) or ``public``
(unlabelled texts a PromptPATE job's teachers label; never charged, never given a budget).
Public records sit in the same table, with an empty label (or, for a public dataset uploaded
``labelled``, a validation set, with their task labels), and are never returned either.

A prompt set is a DP output and outlives its dataset's deletion; a PromptDPSGD prompt set also
holds its soft prompt (the bytes and their hash, in the same row), so it lives and goes with it.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy import false as sa_false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def new_id() -> str:
    return uuid.uuid4().hex


def now() -> datetime:
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """A stored timestamp with its zone: SQLite returns them naive, and every timestamp the
    service writes is UTC (:func:`now`)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar = {dict[str, Any]: JSON, list[Any]: JSON}


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    # Set by `dpsyn admin tenants disable`: every key of the tenant is refused until cleared.
    disabled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class KeyScope(StrEnum):
    ADMIN = "admin"  # everything of its tenant
    PROMPTS_READ = "prompts:read"  # read prompts and complete with them: DP outputs only
    # Issue 34: every tenant's budgets, ledgers and job counts, read-only, and nothing else
    # (no records, no prompts, no writes). Only the operator creates one (``dpsyn admin``).
    ORG_READ = "org:read"


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the key
    scope: Mapped[str] = mapped_column(String(32), default=KeyScope.ADMIN.value)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    # Migration 0014. A name the creator chose (NULL: none; keys made before had
    # none), and when the key last opened the API or the dashboard, written at most once a
    # minute per key (app.services.key_cache.LastUsedThrottle): never a write per request.
    name: Mapped[str | None] = mapped_column(String(100), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Migration 0018: what the key asked of the engine through the OpenAI-compatible
    # endpoint (app.services.openai_compat.record_usage), one write per answer.
    usage_requests: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    usage_prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    usage_completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class DashboardSession(Base):
    """A dashboard sign-in (``app.ui.store``), named by the SHA-256 of its cookie's nonce.
    Signing out deletes the row, so a copy of the cookie opens nothing afterwards."""

    __tablename__ = "ui_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class DatasetKind(StrEnum):
    PRIVATE = "private"  # labelled records; every job on it is charged to its budget
    PUBLIC = "public"  # texts for PromptPATE (or labelled: a validation set); never charged


# Migration 0024: a name reaches one dataset (``app.services.upload_checks.free_name``):
# unique per tenant among the datasets not deleted (a deleted one's name is free again).
_LIVE = text("deleted_at IS NULL")


class Dataset(Base):
    __tablename__ = "datasets"
    __table_args__ = (
        Index(
            "uq_datasets_live_name",
            "tenant_id",
            "name",
            unique=True,
            sqlite_where=_LIVE,
            postgresql_where=_LIVE,
        ),
    )
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(
        String(16), default=DatasetKind.PRIVATE.value, server_default=DatasetKind.PRIVATE.value
    )
    task: Mapped[dict[str, Any]] = mapped_column(JSON)  # the TaskSpec, public ({}: none)
    label_counts: Mapped[dict[str, Any]] = mapped_column(JSON)
    record_count: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    deleted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Migration 0012. The owner's opt-in that the per-label record counts of this
    # private dataset are public: jobs then plan with the exact counts and release none;
    # otherwise every job releases the counts it plans with under DP (charged). Audited:
    # when and by which API key (an ID, never the key) the current setting was chosen (at
    # the upload that declared it, or by the last change); NULL: private by default, never
    # changed. Jobs record which they used (``JobPublic.counts``).
    counts_public: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    counts_public_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    counts_public_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Migration 0020: the dataset whose budget and ledger this one charges (its owner linked
    # it at upload with ``budget_of``, because its records had been uploaded before); always
    # the root owner, never a chain. NULL: its own budget. ``app.ledger.owners``.
    # No foreign key (as ``jobs.validation_dataset_id``): SQLite then drops it in place.
    budget_dataset_id: Mapped[str | None] = mapped_column(String(32), index=True, nullable=True)
    # Migration 0023: when the retention setting (``DPSYN_RECORD_RETENTION_DAYS``) dropped the
    # records and destroyed their data key; the row, budget, ledger and prompts stay. NULL:
    # the records are kept (or were deleted by the owner: ``deleted_at``).
    records_dropped_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )


class RecordFingerprint(Base):
    """Migration 0020: a private record's keyed fingerprint (HMAC-SHA256 under the server's
    ``DPSYN_FINGERPRINT_KEY`` of its normalised text, never a plain hash; the label is not
    part of it), with the dataset it was first uploaded in. Never deleted, not even with the
    dataset: a record's budget outlives its dataset (``app.services.fingerprints``)."""

    __tablename__ = "record_fingerprints"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


#: Characters of a record's label: also the bound on a task's labels and candidates, which
#: become record labels (a 500-character column until the records were sealed).
LABEL_MAX_CHARS = 500


class DatasetRecord(Base):
    """One record, sealed (migration 0022): its text and label as one AES-GCM value under
    its dataset's data key, which lives outside the database (``app.db.record_keys``)."""

    __tablename__ = "dataset_records"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    sealed: Mapped[bytes] = mapped_column(LargeBinary)


class RecordRead(Base):
    """Migration 0023: one read of a dataset's records (``app.services.record_reads``),
    written before the records are opened: who read (a job, an advice run or a validation,
    as kind and ID), the process that read (host:pid, and the attempt's token where the
    reader holds a lease), how many records and when. Never a record's text. Append-only."""

    __tablename__ = "record_reads"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    reader_kind: Mapped[str] = mapped_column(String(16))
    reader_id: Mapped[str] = mapped_column(String(32))
    process: Mapped[str] = mapped_column(String(200))
    record_count: Mapped[int] = mapped_column(Integer)
    read_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


#: A budget's default warn threshold: the share of its epsilon at which it is flagged.
DEFAULT_WARN_THRESHOLD = 0.8


class Budget(Base):
    """A dataset's total budget. The accounting mode is fixed per budget so that all of its
    events compose under one accountant."""

    __tablename__ = "budgets"
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), primary_key=True)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    accounting: Mapped[str] = mapped_column(String(16))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    # The fraction of the budget at which the dashboard and the alert route warn (migration
    # 0010); public metadata of the budget, like its epsilon.
    warn_threshold: Mapped[float] = mapped_column(
        Float, default=DEFAULT_WARN_THRESHOLD, server_default=str(DEFAULT_WARN_THRESHOLD)
    )


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


# The one split of the statuses: a job that may still run (a worker may claim it, it holds a
# reservation) and one that is final (no worker writes it again; its charge is settled).
ACTIVE_STATUSES = frozenset({JobStatus.QUEUED, JobStatus.RUNNING})
TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})


class Job(Base):
    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    # PromptPATE only: the public dataset whose texts the teachers label (never charged)
    public_dataset_id: Mapped[str | None] = mapped_column(
        ForeignKey("datasets.id"), index=True, nullable=True
    )
    method: Mapped[str] = mapped_column(String(32))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)  # the method's validated config
    schedule: Mapped[list[Any]] = mapped_column(JSON)  # public label of each shot ([]: PATE)
    event: Mapped[dict[str, Any]] = mapped_column(JSON)  # what the ledger charges
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED.value, index=True)
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    touched_data: Mapped[bool] = mapped_column(Boolean, default=False)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # The running attempt's lease: who runs it (host:pid:token) and until when, renewed by
    # its heartbeat. A running job whose lease expired has no live worker (reapers fail it).
    lease_owner: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    # The outbox mark: when the job's task was last sent to the queue (set with the row, in
    # the transaction that admits it). Dispatchers send a queued job again once it is older
    # than DPSYN_REDISPATCH_AFTER_S; NULL (written by older code) counts as never sent.
    dispatched_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True, default=now
    )
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    prompt_set_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Migration 0011. The public labelled dataset the stored prompt is scored on after the
    # run (post-processing, never charged); no foreign key, as prompt_sets.dataset_id: the
    # dataset may be deleted, and SQLite cannot drop a column a foreign key names.
    validation_dataset_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # The ID of the API key that submitted the job (NULL: older rows, jobs made outside
    # the API). An ID, never the key: shown to the tenant's admins on the job page.
    submitted_by: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Counts of the finished run that are DP outputs themselves (PromptPATE: queries answered)
    stats: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class PromptSet(Base):
    __tablename__ = "prompt_sets"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), unique=True)  # one per job
    dataset_id: Mapped[str] = mapped_column(String(32), index=True)
    task: Mapped[dict[str, Any]] = mapped_column(JSON)
    demonstrations: Mapped[list[Any]] = mapped_column(JSON)
    prompt: Mapped[str] = mapped_column(Text)
    method: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(500))
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    # PromptDPSGD only (all four set, or none): the soft prompt's safetensors file
    # (``app.promptdpsgd.artifact``), trained for ``model``, with its SHA-256 and shape. The
    # bytes are deferred: listing or reading a prompt set never loads them, only a download
    # or a /complete does.
    soft_prompt: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True, deferred=True)
    soft_prompt_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    soft_prompt_length: Mapped[int | None] = mapped_column(Integer, nullable=True)
    soft_prompt_hidden: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Migration 0011: the score on the job's validation set (``app.services.prompts``):
    # {"dataset_id", "status": pending|scored|not_scored, "n", "accuracy" | "reason"}; NULL
    # when the job named none. Written after the prompt, by the worker; public values only.
    validation: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class AdviceStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class AdviceRun(Base):
    """Migration 0013: one ``advise`` run on a public labelled dataset
    (:mod:`app.eval.advice`). Public inputs and outputs only: never charged, no ledger."""

    __tablename__ = "advice_runs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    dataset_id: Mapped[str] = mapped_column(String(32))  # a public dataset; no foreign key
    config: Mapped[dict[str, Any]] = mapped_column(JSON)  # the validated AdviceConfig
    status: Mapped[str] = mapped_column(String(16), default=AdviceStatus.QUEUED.value, index=True)
    progress_done: Mapped[int] = mapped_column(Integer, default=0)
    progress_total: Mapped[int] = mapped_column(Integer, default=0)
    # Migration 0016: the runner that claimed it and until when (renewed while it
    # runs), a cancellation asked of a running run, and the tenant's place in its own queue
    # when the run was created (runners take every tenant's first run before any second).
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_expires_at: Mapped[datetime | None] = mapped_column(
        DateTime(timezone=True), nullable=True
    )
    cancel_requested: Mapped[bool] = mapped_column(
        Boolean, default=False, server_default=sa_false()
    )
    position: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # Migration 0026: how long the rest will take ("the rest about 2-4 min (5 runs)",
    # app.eval.run_estimate), as the runner last wrote it; served only while the run runs.
    estimate: Mapped[str | None] = mapped_column(Text, nullable=True)


class LedgerKind(StrEnum):
    RESERVE = "reserve"
    COMMIT = "commit"
    RELEASE = "release"
    # A dataset's count release (migration 0015): charged once, never given back; its
    # ``job_id`` is the release's ID (``count_releases.id``), not a job's.
    COUNTS = "counts"


class LedgerEntry(Base):
    __tablename__ = "ledger"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    job_id: Mapped[str] = mapped_column(String(32), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    epsilon: Mapped[float] = mapped_column(Float)  # the job's own epsilon at its delta
    delta: Mapped[float] = mapped_column(Float)
    event: Mapped[dict[str, Any]] = mapped_column(JSON)  # app.privacy.events.to_dict
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    # Migration 0019: the batch the job was declared in (a reserve entry; its own job ID
    # when submitted alone). NULL on older rows: read as the job's own ID (``batch_of``).
    batch_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Migration 0021: the entry's place in its dataset's hash chain (``app.ledger.chain``):
    # its position (1, 2, ...; unique per dataset, so two writers can never fork a chain),
    # the SHA-256 of its content and of the previous entry's hash, and ``chain_origin``:
    # NULL when chained as it was written, "migration" for the rows that existed when the
    # chains were started (vouched for from then on only), "restored" for an entry an
    # operator re-applied from the exported heads after a restore. NULL in the first two
    # columns: a row inserted by hand (``dpsyn admin ledger verify`` reports it).
    chain_seq: Mapped[int | None] = mapped_column(Integer, nullable=True)
    chain_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    chain_origin: Mapped[str | None] = mapped_column(String(16), nullable=True)

    __table_args__ = (Index("uq_ledger_chain", "dataset_id", "chain_seq", unique=True),)

    @property
    def batch_of(self) -> str:
        """The declared batch of this entry's job (its own ID when it was alone)."""
        return self.batch_id or self.job_id


class LedgerHold(Base):
    """Migration 0021: a dataset whose ledger is behind (or other than) the head exported
    outside the database (``app.ledger.heads``): found at start, e.g. after a restore of an
    older backup. Admissions charging its budget are refused while ``acknowledged_at`` is
    NULL; ``dpsyn admin ledger acknowledge`` re-applies the missing entries and sets it."""

    __tablename__ = "ledger_holds"
    dataset_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    detected_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    database_seq: Mapped[int] = mapped_column(Integer)  # the chain's length in the database
    exported_seq: Mapped[int] = mapped_column(Integer)  # the exported head's position
    exported_hash: Mapped[str] = mapped_column(String(64))
    acknowledged_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    reapplied: Mapped[int | None] = mapped_column(Integer, nullable=True)


class CountReleaseRow(Base):
    """Migration 0015: the one release of a dataset's per-label counts for one
    version of its records (``digest``: the SHA-256 of the exact counts, never shown), as
    drawn (``noisy``: a DP output), with its noise multiplier and cost. Charged by the
    ledger row of kind ``counts`` whose ``job_id`` is this ``id``; never updated."""

    __tablename__ = "count_releases"
    __table_args__ = (UniqueConstraint("dataset_id", "digest", name="uq_count_releases_version"),)
    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"), index=True)
    digest: Mapped[str] = mapped_column(String(64))
    sigma: Mapped[float] = mapped_column(Float)
    noisy: Mapped[dict[str, Any]] = mapped_column(JSON)
    epsilon: Mapped[float] = mapped_column(Float)
    delta: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class PlannerChoiceRecord(Base):
    """Migration 0017: an AdaDPSyn planner choice remembered by the SHA-256 of its
    public shape (:mod:`app.privacy.planner_cache`), shared by every process. Public values
    only; a row is never updated."""

    __tablename__ = "planner_choices"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    choice: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class CalibrationRecord(Base):
    """A noise calibration remembered by the SHA-256 of its public inputs
    (:mod:`app.privacy.calibration_cache`), shared by every API process. Public values only:
    no record, no tenant; a row is never updated (the same key always has the same answer)."""

    __tablename__ = "calibrations"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    multiplier: Mapped[float] = mapped_column(Float)
    epsilon: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
