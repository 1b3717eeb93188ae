"""Budgets follow the records: keyed record fingerprints (docs/privacy.md).

Each record of a private upload gets a fingerprint: HMAC-SHA256, under the server's secret
``DPSYN_FINGERPRINT_KEY``, of its normalised text (NFC, whitespace runs made one space,
stripped; case kept; the label left out, so that a record uploaded again with a corrected
label is still the same person's record). Never a plain hash of the text: without the key a
fingerprint cannot be checked against a guessed record. ``record_fingerprints`` keeps, per
tenant, each fingerprint with the dataset it was first uploaded in, and is never deleted.

An upload of a private dataset some of whose records the tenant uploaded before (in a live
or a deleted dataset) is refused (409 ``records_seen``, naming the earlier datasets and how
many of the upload's records each holds), unless it is linked with ``budget_of``: the new
dataset then charges that dataset's budget and ledger (``datasets.budget_dataset_id``, always
the root owner: :mod:`app.ledger.owners`). Records that belong to two or more budgets cannot
be linked (409 ``records_span_budgets``): two budgets cannot be merged.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from hashlib import sha256

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from app.db.models import Dataset, DatasetKind, RecordFingerprint
from app.ledger.owners import budget_owner_id
from app.settings import Settings

from .errors import ConflictError, InvalidError
from .rows import tenant_row

log = logging.getLogger(__name__)

_QUERY_BATCH = 5000
_PROCESS_KEY = secrets.token_bytes(32)  # development without a kept key only
_warned: list[bool] = []


def normalise(text: str) -> str:
    """A record's text as fingerprinted: NFC, whitespace runs made one space, stripped."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def fingerprint(key: bytes, text: str) -> str:
    """The record's keyed fingerprint (hex HMAC-SHA256 of :func:`normalise`'s text)."""
    return hmac.new(key, normalise(text).encode("utf-8"), sha256).hexdigest()


def fingerprints(key: bytes, texts: Iterable[str]) -> list[str]:
    """Each text's fingerprint, in order."""
    return [fingerprint(key, text) for text in texts]


def fingerprint_key(settings: Settings) -> bytes:
    """The key of the fingerprints: ``DPSYN_FINGERPRINT_KEY`` (``dpsyn serve`` keeps one in
    its data directory in development); in development without one, a random key of this
    process (re-uploads are then recognised only until it stops: a warning says so once).
    Production requires the setting (``Settings.check_serving``)."""
    if settings.fingerprint_key is not None:
        return settings.fingerprint_key.get_secret_value().encode("utf-8")
    if settings.environment == "production":
        raise RuntimeError("production needs DPSYN_FINGERPRINT_KEY")
    if not _warned:
        _warned.append(True)
        log.warning(
            "DPSYN_FINGERPRINT_KEY is not set: record fingerprints use a random key of this "
            "process, so records uploaded before it started are not recognised"
        )
    return _PROCESS_KEY


def seen_in(session: Session, tenant_id: str, prints: Sequence[str]) -> dict[str, int]:
    """The tenant's earlier datasets that hold some of the upload's records (``prints``, one
    per record), each with how many of the upload's records it holds, oldest first."""
    first: dict[str, str] = {}
    distinct = sorted(set(prints))
    for start in range(0, len(distinct), _QUERY_BATCH):
        batch = distinct[start : start + _QUERY_BATCH]
        rows = session.execute(
            select(RecordFingerprint.fingerprint, RecordFingerprint.dataset_id).where(
                RecordFingerprint.tenant_id == tenant_id,
                RecordFingerprint.fingerprint.in_(batch),
            )
        )
        first.update({print_: dataset for print_, dataset in rows})
    held = Counter(first[p] for p in prints if p in first)
    return dict(sorted(held.items(), key=lambda item: (-item[1], item[0])))


def _held_text(held: dict[str, int]) -> str:
    return ", ".join(
        f"{dataset} ({count} record{'s' * (count != 1)})" for dataset, count in held.items()
    )


def link_target(session: Session, tenant_id: str, budget_of: str) -> str:
    """The root budget owner of the tenant's private dataset ``budget_of`` (live or
    deleted: a deleted dataset keeps its budget); 404 for another tenant's, 422 for a public
    one."""
    dataset = tenant_row(session, Dataset, tenant_id, budget_of, "dataset")
    if dataset.kind == DatasetKind.PUBLIC:
        raise InvalidError(
            f"budget_of: dataset {budget_of!r} is public: it is never charged and has no budget"
        )
    return budget_owner_id(session, dataset.id)


def check_upload(
    session: Session, tenant_id: str, prints: Sequence[str], budget_of: str | None
) -> str | None:
    """The dataset whose budget a private upload (its records' ``prints``) will charge (None:
    a budget of its own), or the refusal: 409 ``records_seen`` when records were uploaded
    before and it is not linked to their budget, 409 ``records_span_budgets`` when they
    belong to two or more budgets. ``budget_of`` may name a dataset that shares no record
    with the upload (the owner's choice to pool)."""
    held = seen_in(session, tenant_id, prints)
    owners = {dataset: budget_owner_id(session, dataset) for dataset in held}
    budgets = sorted(set(owners.values()))
    if len(budgets) > 1:
        raise _span_error(held, owners, budgets)
    target = link_target(session, tenant_id, budget_of) if budget_of else None
    if held and target != budgets[0]:
        raise _seen_error(held, budgets[0], target)
    return target


def _seen_error(held: dict[str, int], owner: str, target: str | None) -> ConflictError:
    total = sum(held.values())
    head = (
        f"{total} of the upload's records were uploaded before, in dataset(s) "
        f"{_held_text(held)}, and already charge the budget of dataset {owner}"
    )
    if target is not None:
        head += f", not dataset {target}'s"
    return ConflictError(
        f"{head}: records keep their budget. Upload them with budget_of {owner} to charge "
        "that budget, or leave those records out",
        code="records_seen",
        datasets=held,
        budget_dataset_id=owner,
    )


def _span_error(held: dict[str, int], owners: dict[str, str], budgets: list[str]) -> ConflictError:
    by_budget = "; ".join(
        f"budget of {budget}: " + _held_text({d: n for d, n in held.items() if owners[d] == budget})
        for budget in budgets
    )
    return ConflictError(
        f"the upload's records were uploaded before under {len(budgets)} different budgets "
        f"({by_budget}); a dataset charges one budget and two budgets cannot be merged: "
        "upload the records of each budget apart (each with budget_of), or leave them out",
        code="records_span_budgets",
        datasets=held,
        budgets=budgets,
    )


def store_new(session: Session, tenant_id: str, dataset_id: str, prints: Sequence[str]) -> None:
    """Record the upload's fingerprints not seen before as first uploaded in ``dataset_id``
    (seen ones keep their first dataset). In the upload's transaction: a concurrent upload
    of the same records fails on the key (tenant, fingerprint) and is then refused."""
    known: set[str] = set()
    distinct = sorted(set(prints))
    for start in range(0, len(distinct), _QUERY_BATCH):
        batch = distinct[start : start + _QUERY_BATCH]
        known.update(
            session.scalars(
                select(RecordFingerprint.fingerprint).where(
                    RecordFingerprint.tenant_id == tenant_id,
                    RecordFingerprint.fingerprint.in_(batch),
                )
            )
        )
    fresh = [p for p in distinct if p not in known]
    for start in range(0, len(fresh), _QUERY_BATCH):
        session.execute(
            insert(RecordFingerprint),
            [
                {"tenant_id": tenant_id, "fingerprint": p, "dataset_id": dataset_id}
                for p in fresh[start : start + _QUERY_BATCH]
            ],
        )
