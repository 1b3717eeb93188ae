"""Datasets: upload, metadata, deletion.

An upload, a table or a built-in task's own format (TREC's ``train.txt``), is parsed by the
readers of :mod:`app.synthesis.data` (the same code as the command line), from a temporary
file that is removed afterwards. Their error messages name the file, line and columns, never
record text; the temporary path in them is replaced by the name the client gave. Only the
records table holds private text, and nothing here returns it.

A *public* dataset holds unlabelled texts that PromptPATE jobs have the teachers label
(:mod:`app.pate.public` reads them: a text column, any label column ignored). Its records are
stored with an empty label and, like private ones, never returned; it is never charged, so it
takes no budget and cannot be the private dataset of a job. Its task is optional metadata.
A public upload with ``labelled`` keeps its labels (read exactly as a private upload's, so
they must be its task's): it can then be a job's *validation set*, on which the stored prompt
is scored after the run (``app.services.prompts``); it is still never charged.

Metadata (name, task, label counts, record count) is shown to the dataset's owner (admin
keys) only. A private dataset's counts are private unless its owner declares them public
(``counts_public``, at upload or with :func:`set_counts_public`; audited: when and by which
key): a job on a dataset without the declaration plans with counts released under DP and
charged (``app.privacy.unit``), so that nothing it writes holds an exact count.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError
from sqlalchemy import delete, func, insert, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db import record_keys
from app.db.models import (
    ACTIVE_STATUSES,
    Dataset,
    DatasetKind,
    DatasetRecord,
    Job,
    JobStatus,
    now,
)
from app.pate.public import read_public
from app.synthesis.data import (
    DataError,
    Record,
    has_own_format,
    load_dataset,
    own_format,
    own_format_tasks,
)
from app.synthesis.generator import partition_sizes
from app.synthesis.tasks import BUILTIN_TASKS, TaskSpec, describe_validation_error

from . import fingerprints, record_reads, upload_checks
from .errors import ConflictError, InvalidError, TooLargeError
from .job_end import close_job, lease_expired
from .record_reads import Reader
from .rows import tenant_page, tenant_row
from .storable import DATASET_NAME_MAX_CHARS, LABEL_MAX_CHARS, text_problem, too_long

FORMATS = {".csv": ".csv", ".tsv": ".tsv", ".jsonl": ".jsonl", ".ndjson": ".jsonl"}
_CHUNK = 1 << 20
_INSERT_BATCH = 5000


def parse_task(value: str | Mapping[str, Any]) -> TaskSpec:
    """A built-in task by name, or an inline custom :class:`TaskSpec` (a mapping or its JSON).

    Never a file path: clients must not make the server read its own files.
    """
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("{"):
            task = BUILTIN_TASKS.get(text.lower())
            if task is None:
                raise InvalidError(
                    f"task: unknown built-in task {text!r} (built-in: "
                    f"{', '.join(sorted(BUILTIN_TASKS))}); or give a custom task spec object"
                )
            return task
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise InvalidError(f"task: invalid JSON at position {err.pos}: {err.msg}") from None
        except RecursionError:
            raise InvalidError("task: invalid JSON: nested too deeply") from None
        if not isinstance(value, dict):
            raise InvalidError("task: a custom task spec must be a JSON object")
    try:
        spec = TaskSpec.model_validate(dict(value))
    except ValidationError as err:
        raise InvalidError(f"task: invalid task spec: {describe_validation_error(err)}") from None
    check_task_sizes(spec)
    return spec


def check_task_sizes(spec: TaskSpec) -> None:
    """Refuse a custom task whose labels or candidates the label column cannot hold (422).

    A classification record is stored under one of the task's labels, and an extraction
    task's candidates are values of its label; the rest of a spec is stored as JSON, which has
    no size of its own (an upload's size bounds it).
    """
    for field in ("labels", "candidates"):
        for i, value in enumerate(getattr(spec, field)):
            if problem := too_long("a label", len(value), LABEL_MAX_CHARS):
                raise InvalidError(f"task.{field}[{i}]: {problem}")


def upload_suffix(filename: str | None, fmt: str | None) -> str | None:
    """The table reader's file extension, from an explicit format or the uploaded file's
    name; None for a file that is no table by its name (a built-in task's own format, such
    as TREC's ``train.txt``, or a public upload's plain text lines: :func:`store_upload`)."""
    if fmt:
        suffix = FORMATS.get("." + fmt.lower().lstrip("."))
        if suffix is None:
            raise InvalidError(f"format: unsupported format {fmt!r} (use csv, tsv or jsonl)")
        return suffix
    return FORMATS.get(Path(filename or "").suffix.lower())


def _no_format(display_name: str) -> InvalidError:
    """A private file that is no table by its name, for a task without a format of its own."""
    return InvalidError(
        f"file: cannot tell the format of {display_name!r} from its name (use a .csv, .tsv "
        "or .jsonl file, give format=csv|tsv|jsonl, or name the built-in task whose own "
        f"format it is: task={'|'.join(own_format_tasks())})"
    )


def _own_format_note(task: TaskSpec, display_name: str) -> str:
    """Why a file was read in a task's own format: it tells the reader of an error message
    how to have it read as a table instead."""
    return (
        f" (read in task {task.name!r}'s own format: {display_name!r} is not a table with "
        "a header row naming its columns; give format=csv|tsv|jsonl and the columns for one)"
    )


def copy_limited(source: BinaryIO, target: BinaryIO, limit: int) -> int:
    """Copy ``source`` to ``target``; :class:`TooLargeError` past ``limit`` bytes."""
    total = 0
    while chunk := source.read(_CHUNK):
        total += len(chunk)
        if total > limit:
            raise too_large(limit)
        target.write(chunk)
    return total


def too_large(limit: int) -> TooLargeError:
    return TooLargeError(
        f"the upload exceeds the size limit of {limit} bytes (DPSYN_MAX_UPLOAD_BYTES)",
        limit=limit,
    )


def read_upload(
    task: TaskSpec,
    write: Any,
    *,
    suffix: str | None,
    text_column: str,
    label_column: str,
    display_name: str,
) -> list[Record]:
    """Records of an upload: ``write(file)`` fills a temporary file, the readers parse it.

    A built-in task's own format (:func:`app.synthesis.data.own_format`) is read as the
    command line reads it (``load_dataset`` without columns); anything else as a table.
    """
    if suffix is None and not has_own_format(task):
        raise _no_format(display_name)
    with tempfile.TemporaryDirectory(prefix="dpsyn-upload-") as tmp:
        path = Path(tmp) / f"upload{suffix or '.txt'}"
        with path.open("wb") as handle:
            write(handle)
        own = own_format(task, path, text_column, label_column)
        try:
            if own:
                return load_dataset(task, path, max_label_chars=LABEL_MAX_CHARS)
            return load_dataset(
                task, path, text_column, label_column, max_label_chars=LABEL_MAX_CHARS
            )
        except DataError as err:
            note = _own_format_note(task, display_name) if own else ""
            raise InvalidError(str(err).replace(str(path), display_name) + note) from None


def read_public_upload(
    write: Any,
    *,
    suffix: str | None,
    text_column: str,
    display_name: str,
    task: TaskSpec | None = None,
) -> list[str]:
    """Texts of a public upload (one per record, in file order); labels are not read.

    As the command line sends them: a built-in task's own format gives its records' texts
    (``task=sst2`` on SST-2 lines); any other file that is no table by its name is plain
    text, one text per non-blank line.
    """
    with tempfile.TemporaryDirectory(prefix="dpsyn-upload-") as tmp:
        path = Path(tmp) / f"upload{suffix or '.txt'}"
        with path.open("wb") as handle:
            write(handle)
        # A public table needs only its text column named in its header row.
        own = task is not None and own_format(task, path, text_column, text_column)
        try:
            if task is not None and own:
                return [record.text for record in load_dataset(task, path)]
            return read_public(path, text_column)
        except DataError as err:
            note = _own_format_note(task, display_name) if task is not None and own else ""
            raise InvalidError(str(err).replace(str(path), display_name) + note) from None


def jsonl_writer(records: Iterable[Mapping[str, Any]]) -> Any:
    """A ``write`` for :func:`read_upload` that puts JSON records one per line."""

    def write(handle: BinaryIO) -> None:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")

    return write


def store_upload(
    session: Session,
    *,
    tenant_id: str,
    name: str | None,
    task: str | Mapping[str, Any] | None,
    public: bool,
    write: Any,
    default_name: str | None = None,
    suffix: str | None,
    text_column: str,
    label_column: str,
    display_name: str,
    max_records: int,
    max_record_chars: int,
    fingerprint_key: bytes,
    labelled: bool = False,
    counts_public: bool = False,
    declared_by: str | None = None,
    budget_of: str | None = None,
) -> Dataset:
    """Parse an upload (``write(file)`` fills a temporary file) and store it; commits.

    A private dataset needs a task and reads both columns, or a built-in task's own format
    (``suffix`` None: a file that is no table by its name); a public one reads the text
    column only, its task (optional) is metadata. ``name`` (given) must be free among the
    tenant's live datasets (409 ``name_taken``); without it, ``default_name`` or the task's
    name, numbered when taken (:func:`app.services.upload_checks.free_name`). Every
    record is checked (storable text, at most ``max_record_chars``) before anything is
    inserted, so a refused upload changes nothing stored. ``labelled`` (public only) reads
    the label column as a private upload does: a validation set, which needs a task.
    ``counts_public`` (private only) is the owner's declaration that the label counts are
    public, recorded with the ID of the key that made it (``declared_by``). Private records
    seen before refuse the upload unless ``budget_of`` links it (:func:`create_private_dataset`).
    """
    _check_kind(task, public=public, labelled=labelled, counts_public=counts_public)
    _check_budget_of(budget_of, public=public)
    spec = parse_task(task) if task is not None else None
    default = default_name or (spec.name if spec is not None else "public")
    name = _upload_name(session, tenant_id, name, default)
    if public and not labelled:
        texts = read_public_upload(
            write, suffix=suffix, text_column=text_column, display_name=display_name, task=spec
        )
        check_records([Record(text, "") for text in texts], max_record_chars)
        return create_public_dataset(
            session,
            tenant_id=tenant_id,
            name=name,
            task=spec,
            texts=texts,
            max_records=max_records,
        )
    assert spec is not None
    records = read_upload(
        spec,
        write,
        suffix=suffix,
        text_column=text_column,
        label_column=label_column,
        display_name=display_name,
    )
    check_records(records, max_record_chars)
    if public:  # a labelled public dataset (a validation set) is never charged
        return _validation_set(session, tenant_id, name, spec, records, max_records)
    return create_private_dataset(
        session,
        tenant_id=tenant_id,
        name=name,
        task=spec,
        records=records,
        max_records=max_records,
        counts_public=counts_public,
        declared_by=declared_by,
        prints=fingerprints.fingerprints(fingerprint_key, (r.text for r in records)),
        budget_of=budget_of,
    )


def _upload_name(session: Session, tenant_id: str, given: str | None, default: str) -> str:
    """The new dataset's name: ``given``, refused if in use, or ``default`` numbered until
    free (:func:`app.services.upload_checks.free_name`)."""
    name = given or default
    if problem := text_problem(name):
        raise InvalidError(f"name: {problem}")  # it may come from the uploaded file's name
    name = name[:DATASET_NAME_MAX_CHARS]  # only a default can be longer: a given one is checked
    return upload_checks.free_name(session, tenant_id, name, given=bool(given))


def _validation_set(
    session: Session,
    tenant_id: str,
    name: str,
    task: TaskSpec,
    records: list[Record],
    max_records: int,
) -> Dataset:
    """A labelled public dataset (a validation set): never charged, never fingerprinted."""
    return create_dataset(
        session,
        tenant_id=tenant_id,
        name=name,
        task=task,
        records=records,
        max_records=max_records,
        kind=DatasetKind.PUBLIC,
    )


def create_private_dataset(
    session: Session,
    *,
    tenant_id: str,
    name: str,
    task: TaskSpec,
    records: list[Record],
    max_records: int,
    prints: list[str],
    budget_of: str | None = None,
    counts_public: bool = False,
    declared_by: str | None = None,
) -> Dataset:
    """Store a private dataset whose records' fingerprints are ``prints``; commits. Refused,
    nothing stored: (409) when records were uploaded before and it is not linked to their
    budget with ``budget_of`` (:func:`app.services.fingerprints.check_upload`), also when a
    concurrent upload of the same records commits first; (422) when its records all carry
    one label (:func:`app.services.upload_checks.check_private_labels`)."""
    _check_size(len(records), max_records)
    owner = fingerprints.check_upload(session, tenant_id, prints, budget_of)
    upload_checks.check_private_labels(task, records)
    try:
        return create_dataset(
            session,
            tenant_id=tenant_id,
            name=name,
            task=task,
            records=records,
            max_records=max_records,
            counts_public=counts_public,
            declared_by=declared_by,
            prints=prints,
            budget_dataset_id=owner,
        )
    except IntegrityError:  # another upload stored some of the same records meanwhile
        session.rollback()
        fingerprints.check_upload(session, tenant_id, prints, budget_of)
        raise


def _check_budget_of(budget_of: str | None, *, public: bool) -> None:
    if budget_of and public:
        raise InvalidError("budget_of: only for a private dataset (a public one is never charged)")


def _check_kind(
    task: str | Mapping[str, Any] | None, *, public: bool, labelled: bool, counts_public: bool
) -> None:
    """Refuse (422) an upload's flags that do not go together, naming the field."""
    if counts_public and public:
        raise InvalidError(COUNTS_PUBLIC_PRIVATE_ONLY)
    if labelled and not public:
        raise InvalidError("labelled: only for a public dataset (a private one always is)")
    if labelled and task is None:
        raise InvalidError(
            "task: required for a labelled public dataset (its labels must be the task's)"
        )
    if task is None and not public:
        raise InvalidError(
            "task: required for a private dataset (a built-in task: "
            f"{', '.join(sorted(BUILTIN_TASKS))}; or a task spec); "
            "or upload unlabelled texts with public=true"
        )


def create_dataset(
    session: Session,
    *,
    tenant_id: str,
    name: str,
    task: TaskSpec,
    records: list[Record],
    max_records: int,
    kind: DatasetKind = DatasetKind.PRIVATE,
    counts_public: bool = False,
    declared_by: str | None = None,
    prints: Sequence[str] = (),
    budget_dataset_id: str | None = None,
) -> Dataset:
    """Store a labelled dataset's metadata and records; commits. Private, or a public
    labelled one (a validation set: never charged). ``counts_public``: the owner declared
    the private dataset's label counts public at upload, with the key ``declared_by``.
    ``prints``: the records' fingerprints, stored with them (those not seen before);
    ``budget_dataset_id``: the dataset whose budget it charges (None: its own)."""
    _check_size(len(records), max_records)
    if counts_public and kind != DatasetKind.PRIVATE:
        raise InvalidError(COUNTS_PUBLIC_PRIVATE_ONLY)
    dataset = Dataset(
        tenant_id=tenant_id,
        name=name,
        kind=kind.value,
        task=task.model_dump(mode="json"),
        label_counts=partition_sizes(task, records),
        record_count=len(records),
        counts_public=counts_public,
        counts_public_at=now() if counts_public else None,
        counts_public_by=declared_by if counts_public else None,
        budget_dataset_id=budget_dataset_id,
    )
    return _store(session, dataset, records, prints)


def create_public_dataset(
    session: Session,
    *,
    tenant_id: str,
    name: str,
    task: TaskSpec | None,
    texts: list[str],
    max_records: int,
) -> Dataset:
    """Store a public dataset: unlabelled texts (empty labels, no label counts); commits.

    ``task`` is optional metadata (what the texts are about); jobs take the task of their
    private dataset.
    """
    _check_size(len(texts), max_records)
    dataset = Dataset(
        tenant_id=tenant_id,
        name=name,
        kind=DatasetKind.PUBLIC.value,
        task=task.model_dump(mode="json") if task is not None else {},
        label_counts={},
        record_count=len(texts),
    )
    return _store(session, dataset, [Record(text, "") for text in texts])


def check_records(records: list[Record], max_chars: int) -> None:
    """Refuse a record the database cannot store (422) or longer than ``max_chars`` (413),
    naming its number and field, never its content."""
    for number, record in enumerate(records, start=1):
        for field, value in (("text", record.text), ("label", record.label)):
            if len(value) > max_chars:
                raise TooLargeError(
                    f"record {number}: the {field} has {len(value)} characters, more than the "
                    f"limit of {max_chars} per record (DPSYN_MAX_RECORD_CHARS)",
                    limit=max_chars,
                )
            if problem := text_problem(value):
                raise InvalidError(f"record {number}: the {field} {problem}")


def _check_size(count: int, max_records: int) -> None:
    if count > max_records:
        raise TooLargeError(
            f"the upload has {count} records, more than the limit of {max_records} "
            "(DPSYN_MAX_RECORDS)",
            limit=max_records,
        )


def _store(
    session: Session, dataset: Dataset, records: list[Record], prints: Sequence[str] = ()
) -> Dataset:
    tenant_id, name = dataset.tenant_id, dataset.name
    session.add(dataset)
    try:
        session.flush()
    except IntegrityError:  # another upload took the name since it was checked
        session.rollback()
        upload_checks.free_name(session, tenant_id, name, given=True)  # 409 if so
        raise
    if prints:
        fingerprints.store_new(session, dataset.tenant_id, dataset.id, prints)
    keys = record_keys.current()
    for start in range(0, len(records), _INSERT_BATCH):
        batch = records[start : start + _INSERT_BATCH]
        sealed = keys.seal_records(dataset.id, [(r.text, r.label) for r in batch])
        session.execute(
            insert(DatasetRecord), [{"dataset_id": dataset.id, "sealed": v} for v in sealed]
        )
    session.commit()
    return dataset


def resolve_ref(session: Session, tenant_id: str, ref: str) -> str:
    """The ID of the tenant's dataset that ``ref`` names: its ID, or the name of one of its
    datasets that are not deleted (a unique name got a bare 404). Names are unique among
    those (:func:`app.services.upload_checks.free_name` and the database's unique index), so
    a name reaches at most one; a ref that names none is returned as it came, for the
    caller's own 404. Names are public metadata (the admin's), never records."""
    owned = select(Dataset.id).where(Dataset.tenant_id == tenant_id)
    if session.scalar(owned.where(Dataset.id == ref)) is not None:
        return ref
    named = session.scalar(owned.where(Dataset.name == ref, Dataset.deleted_at.is_(None)))
    return named or ref


def resolve_fields(
    session: Session, tenant_id: str, values: Mapping[str, str | None]
) -> dict[str, str]:
    """:func:`resolve_ref` of each given value (a request's dataset fields), by field."""
    return {name: resolve_ref(session, tenant_id, ref) for name, ref in values.items() if ref}


def get_dataset(
    session: Session, tenant_id: str, dataset_id: str, *, lock: bool = False
) -> Dataset:
    """The tenant's dataset (deleted ones included); another tenant's is not found."""
    return tenant_row(session, Dataset, tenant_id, dataset_id, "dataset", lock=lock)


def get_live_dataset(
    session: Session, tenant_id: str, dataset_id: str, *, lock: bool = False
) -> Dataset:
    """The tenant's dataset, refusing one whose records were deleted (409
    ``dataset_deleted``) or dropped by the retention setting (409 ``records_dropped``)."""
    dataset = get_dataset(session, tenant_id, dataset_id, lock=lock)
    if dataset.deleted_at is not None:
        raise ConflictError(
            f"dataset {dataset_id!r} was deleted: its records are gone", code="dataset_deleted"
        )
    if dataset.records_dropped_at is not None:
        raise ConflictError(
            f"dataset {dataset_id!r}: its records were dropped on "
            f"{dataset.records_dropped_at:%Y-%m-%d} by the retention setting "
            "(DPSYN_RECORD_RETENTION_DAYS: no job had run on them for that long); its budget, "
            "ledger and prompts are kept, but no job can read it again: upload the records anew",
            code="records_dropped",
        )
    return dataset


def get_private_dataset(session: Session, tenant_id: str, dataset_id: str, why: str) -> Dataset:
    """The tenant's live dataset locked for update, refusing a public one (409
    ``public_dataset``, ``why`` saying what a public dataset lacks): a budget or a counts
    declaration belongs to the private dataset a job synthesises from."""
    dataset = get_live_dataset(session, tenant_id, dataset_id, lock=True)
    if dataset.kind == DatasetKind.PUBLIC:
        raise ConflictError(f"dataset {dataset_id!r} is public: {why}", code="public_dataset")
    return dataset


def list_datasets(
    session: Session, tenant_id: str, *, include_deleted: bool, limit: int, offset: int
) -> list[Dataset]:
    where = [] if include_deleted else [Dataset.deleted_at.is_(None)]
    return tenant_page(session, Dataset, tenant_id, *where, limit=limit, offset=offset)


def delete_dataset(session: Session, tenant_id: str, dataset_id: str) -> Dataset:
    """Delete the records; keep the dataset row (marked deleted) and its ledger; commits.

    Queued jobs on it, or using it as their public dataset, are cancelled (their reservations
    released: they never read a record). A running job blocks deletion (409): cancel it and
    wait for it to stop. A running job whose lease expired has no worker left: it is
    cancelled here by the rule of :func:`app.services.job_end.close_job` (charged if it read
    the data). Deleting a deleted dataset changes nothing.
    """
    dataset = get_dataset(session, tenant_id, dataset_id)
    if dataset.deleted_at is not None:
        return dataset
    active = _lock_for_deletion(session, dataset)
    if dataset.deleted_at is not None:  # deleted meanwhile by another request
        session.commit()
        return dataset
    at = now()
    running = [
        job.id for job in active if job.status == JobStatus.RUNNING and not lease_expired(job, at)
    ]
    if running:
        raise ConflictError(
            f"dataset {dataset_id!r} has running job(s) {', '.join(running)}: cancel them "
            "(POST /v1/jobs/{id}/cancel) and wait until they stop",
            code="jobs_running",
            jobs=running,
        )
    for job in active:
        job.cancel_requested = True
        error = (
            "cancelled: the dataset was deleted"
            if job.dataset_id == dataset.id
            else "cancelled: its public dataset was deleted"
        )
        close_job(session, job, status=JobStatus.CANCELLED, error=error)
    dataset.deleted_at = now()
    erase_records(session, dataset)
    return dataset


def erase_records(session: Session, dataset: Dataset) -> None:
    """Delete the dataset's records, commit (with whatever the caller marked on it), then
    destroy its data key. The one way records go: deletion and the retention setting.

    The caller holds the locks of :func:`_lock_for_deletion`. The key goes after the commit:
    an erasure that failed keeps its key. Without the key, the records in every backup of
    the database stay sealed for good."""
    session.execute(delete(DatasetRecord).where(DatasetRecord.dataset_id == dataset.id))
    session.commit()
    record_keys.current().destroy(dataset.id)


def drop_idle_records(
    session: Session, dataset_id: str, ended_before: datetime, at: datetime
) -> bool:
    """The retention setting's erasure of one dataset (``app.services.retention``): drop
    its records and destroy its key if, under the locks of deletion, it still has records,
    no queued or running job, and its last job ended before ``ended_before``; commits. Keeps
    the row (marked ``records_dropped_at`` = ``at``), budget, ledger, prompts and
    fingerprints. True if dropped."""
    dataset = session.get(Dataset, dataset_id)
    if dataset is None:
        return False
    active = _lock_for_deletion(session, dataset)
    last = session.scalar(select(func.max(Job.finished_at)).where(Job.dataset_id == dataset_id))
    kept = dataset.deleted_at is not None or dataset.records_dropped_at is not None
    if kept or active or last is None or _aware(last) >= ended_before:
        session.rollback()
        return False
    dataset.records_dropped_at = at
    erase_records(session, dataset)
    return True


def _aware(at: datetime) -> datetime:
    """A stored time as UTC-aware (SQLite returns it naive)."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


_DELETION_LOCK_TRIES = 3


def _lock_for_deletion(session: Session, dataset: Dataset) -> list[Job]:
    """Lock, in the service's one lock order (``app.ledger.ledger.lock_budget``), the
    dataset's active jobs, then the private datasets they charge, then the dataset itself
    if it is public; returns those jobs. Before, deletion locked the dataset first and then
    its jobs, while a worker settling a job holds the job and then needs the dataset.

    A job admitted between the two steps is not among those locked: then everything is
    rolled back and tried again (a 409 after :data:`_DELETION_LOCK_TRIES`)."""
    for _ in range(_DELETION_LOCK_TRIES):
        active = list(session.scalars(_active_jobs(dataset.id).with_for_update()))
        charged = {job.dataset_id for job in active} | {dataset.id}
        session.scalars(
            select(Dataset.id)
            .where(Dataset.id.in_(sorted(charged)))
            .order_by(Dataset.kind == DatasetKind.PUBLIC.value, Dataset.id)
            .with_for_update()
        ).all()
        now_active = set(session.scalars(_active_jobs(dataset.id).with_only_columns(Job.id)))
        if now_active == {job.id for job in active}:
            session.refresh(dataset)
            return active
        session.rollback()
    raise ConflictError(
        f"dataset {dataset.id!r} is taking new jobs faster than it can be deleted; retry",
        code="dataset_busy",
    )


def _active_jobs(dataset_id: str) -> Any:
    """The active jobs that read the dataset (as their private or public dataset)."""
    return select(Job).where(
        or_(Job.dataset_id == dataset_id, Job.public_dataset_id == dataset_id),
        Job.status.in_(sorted(s.value for s in ACTIVE_STATUSES)),
    )


COUNTS_PUBLIC_PRIVATE_ONLY = (
    "counts_public: only for a private dataset (a public dataset is never charged, and its "
    "texts are public whole)"
)


def set_counts_public(
    session: Session, tenant_id: str, dataset_id: str, *, public: bool, key_id: str | None
) -> Dataset:
    """Declare a private dataset's label counts public, or withdraw the declaration; commits.

    Declaring is the owner's word that the per-label record counts may be treated as public:
    jobs admitted from then on plan with the exact counts and release none (and may use
    paper accounting). Withdrawing makes them private again: jobs admitted from then on
    release the counts they plan with under DP, charged. Jobs already admitted keep what they
    were planned with (each job's record says which). The change is recorded with its time
    and the ID of the key that made it (``key_id``); asking for the current setting changes
    nothing, the record included. A public dataset is refused (409 ``public_dataset``), a
    deleted one too (409 ``dataset_deleted``).
    """
    dataset = get_private_dataset(
        session,
        tenant_id,
        dataset_id,
        "its texts are never charged and public whole, so there are no private counts to declare",
    )
    if bool(dataset.counts_public) != public:
        dataset.counts_public = public
        dataset.counts_public_at = now()
        dataset.counts_public_by = key_id
    session.commit()
    return dataset


def record_count(session: Session, dataset_id: str) -> int:
    """Rows left in the records table for the dataset (0 once deleted)."""
    query = select(func.count()).select_from(DatasetRecord)
    return session.scalar(query.where(DatasetRecord.dataset_id == dataset_id)) or 0


def _opened(session: Session, dataset_id: str, reader: Reader) -> list[tuple[str, str]]:
    """The dataset's records as (text, label), in upload order, opened in memory with its
    data key (``app.db.record_keys``) once ``reader``'s read is recorded and committed
    (:func:`app.services.record_reads.record_read`: the session's transaction ends; a read
    that cannot be recorded raises, and nothing is opened)."""
    sealed = session.scalars(
        select(DatasetRecord.sealed)
        .where(DatasetRecord.dataset_id == dataset_id)
        .order_by(DatasetRecord.id)
    ).all()
    record_reads.record_read(session, dataset_id, reader, len(sealed))
    return record_keys.current().open_records(dataset_id, sealed) if sealed else []


def load_records(session: Session, dataset_id: str, reader: Reader) -> list[Record]:
    """The dataset's records, in upload order (workers only), read by ``reader`` (recorded
    first; commits the session)."""
    return [Record(text, label) for text, label in _opened(session, dataset_id, reader)]


def load_public_texts(session: Session, dataset_id: str, reader: Reader) -> list[str]:
    """A public dataset's texts in upload order (workers only), read by ``reader`` (recorded
    first, as private records are: an upload marked public may still hold what its owner
    would not publish; commits the session). A fixed order, so that the inputs a job draws
    depend on its generator only, not on how the database returns rows."""
    return [text for text, _ in _opened(session, dataset_id, reader)]
