"""What an upload's labels and name must be before it is stored, and the warnings a stored
dataset carries. Read files are checked line by line in :mod:`app.synthesis.data` (a column
named twice, texts that are their labels, rows wider than their header); here is what needs
the whole dataset or the tenant's other datasets.

Messages name labels (the task's, public), counts, columns and dataset IDs and names (the
admin's metadata), never a record's text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Dataset
from app.synthesis.data import Record
from app.synthesis.tasks import TaskKind, TaskSpec

from .errors import ConflictError, InvalidError
from .storable import DATASET_NAME_MAX_CHARS

_LABELS_SHOWN = 8


def _quoted(labels: Sequence[str]) -> str:
    """``'a', 'b', 'c'``; past :data:`_LABELS_SHOWN` labels, the rest counted."""
    shown = ", ".join(repr(label) for label in labels[:_LABELS_SHOWN])
    rest = len(labels) - _LABELS_SHOWN
    return shown + (f" and {rest} more" if rest > 0 else "")


def _records(count: int) -> str:
    return "the 1 record has" if count == 1 else f"all {count} records have"


def check_private_labels(task: TaskSpec, records: Sequence[Record]) -> None:
    """Refuse (422) a private classification dataset whose records all carry one label,
    naming it, the record count and the task's labels without records.

    A job learns to tell the labels apart from their records: with one label it has nothing
    to tell apart, and every demonstration of the others comes from no record. A validation
    set of one label is kept (:func:`dataset_warnings` says what it measures)."""
    if task.kind != TaskKind.CLASSIFICATION or len(task.labels) < 2:
        return
    present = Counter(record.label for record in records)
    if len(present) != 1:
        return
    (label,) = present
    others = [name for name in task.labels if name != label]
    raise InvalidError(
        f"labels: {_records(len(records))} the label {label!r}, and none any other "
        f"of task {task.name!r}'s labels ({_quoted(others)}): a classification dataset of one "
        "label teaches nothing to tell apart; check the label column (label_column, "
        "--label-col) and upload records of at least two labels",
        code="one_label",
    )


def dataset_warnings(task: Mapping[str, Any], label_counts: Mapping[str, int]) -> list[str]:
    """What a stored labelled dataset lacks, for its owner: the task's labels without records,
    and a validation set of one label. Derived from its metadata (task and counts), so the
    upload's answer and every later view say the same. Extraction tasks have none (their
    counts are not by label)."""
    if task.get("kind") != TaskKind.CLASSIFICATION.value or not label_counts:
        return []
    labels = [str(label) for label in task.get("labels", [])]
    empty = [label for label in labels if not label_counts.get(label)]
    warnings = []
    filled = [label for label in labels if label_counts.get(label)]
    if len(filled) == 1:
        warnings.append(
            f"{_records(label_counts[filled[0]])} the label {filled[0]!r}: a score on "
            "them measures that label only"
        )
    if empty:
        warnings.append(
            f"no records for label(s) {_quoted(empty)} ({len(empty)} of the task's "
            f"{len(labels)} labels): a job has no record to learn them from (refused if the "
            "counts are declared public; otherwise their demonstrations are written from "
            "none), and a validation score never tests them; upload records of them, or leave "
            "them out of the task (--labels)"
        )
    return warnings


def _live_names(session: Session, tenant_id: str, prefix: str) -> dict[str, str]:
    """Name -> ID of the tenant's datasets not deleted whose names start with ``prefix``."""
    rows = session.execute(
        select(Dataset.name, Dataset.id).where(
            Dataset.tenant_id == tenant_id,
            Dataset.deleted_at.is_(None),
            Dataset.name.startswith(prefix, autoescape=True),
        )
    )
    return {name: dataset_id for name, dataset_id in rows}


def name_taken(name: str, dataset_id: str) -> ConflictError:
    return ConflictError(
        f"name: {name!r} is already the name of dataset {dataset_id} (a name reaches one "
        "dataset: names are unique among your datasets that are not deleted): choose "
        "another name (name, --name), or delete that dataset first",
        code="name_taken",
        dataset_id=dataset_id,
    )


def free_name(session: Session, tenant_id: str, name: str, *, given: bool) -> str:
    """``name`` if none of the tenant's live datasets bears it. Taken: a ``given`` name is a
    409 ``name_taken`` naming the dataset that bears it; a default one (the task's or the
    file's) becomes the first free ``name-2``, ``name-3``, ... (the answer shows it), cut to
    fit the column. Another tenant's names and deleted datasets' names are free.

    A dataset's name stands for it in every request that takes its ID
    (:func:`app.services.datasets.resolve_ref`): two live datasets of one name would make
    every such request a 409. The database's unique index (migration 0024) holds the rule
    when two uploads race."""
    taken = _live_names(session, tenant_id, name[: DATASET_NAME_MAX_CHARS - 4])
    if name not in taken:
        return name
    if given:
        raise name_taken(name, taken[name])
    number = 2
    while True:
        suffix = f"-{number}"
        candidate = name[: DATASET_NAME_MAX_CHARS - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
        number += 1
