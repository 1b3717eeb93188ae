"""Storing a multipart upload's file: one code path for the API's ``POST /v1/datasets`` and the
dashboard's upload form, so that both apply the same size, record and column limits and give
the same dataset. A module of its own because a route module should import no other route
module: each router then stands alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.api.deps import Principal
from app.api.schemas import DatasetPublic, DatasetUploadForm
from app.services import datasets as service
from app.services.fingerprints import fingerprint_key
from app.settings import Settings


def budget_of_ref(session: Session, principal: Principal, ref: str | None) -> str | None:
    """The upload's ``budget_of``, a dataset's ID or unique name, as an ID (None: none)."""
    return service.resolve_ref(session, principal.tenant_id, ref) if ref else None


def store_file_upload(
    session: Session, settings: Settings, principal: Principal, meta: DatasetUploadForm, upload: Any
) -> DatasetPublic:
    """Store ``upload`` (a Starlette ``UploadFile``) as described by the form's fields.

    A table (CSV/TSV/JSONL by its name or ``format``) or a built-in task's own format (TREC's
    ``train.txt``, read as ``dpsyn datasets upload`` reads it: :func:`service.read_upload`).
    The uploading key (``principal``) owns it, and is recorded if it declares the counts
    public.
    """
    suffix = service.upload_suffix(upload.filename, meta.format)
    display = Path(upload.filename or f"upload{suffix or ''}").name
    upload.file.seek(0)
    dataset = service.store_upload(
        session,
        tenant_id=principal.tenant_id,
        # A private dataset is named after its task (not "train" of train.txt); a public one
        # after its file, whose texts often come from elsewhere (IMDB texts for SST-2).
        name=meta.name,
        default_name=(Path(display).stem or None) if meta.public else None,
        task=meta.task,
        public=meta.public,
        labelled=meta.labelled,
        counts_public=meta.counts_public,
        declared_by=principal.key_id,
        budget_of=budget_of_ref(session, principal, meta.budget_of),
        fingerprint_key=fingerprint_key(settings),
        write=lambda handle: service.copy_limited(upload.file, handle, settings.max_upload_bytes),
        suffix=suffix,
        text_column=meta.text_column,
        label_column=meta.label_column,
        display_name=display,
        max_records=settings.max_records,
        max_record_chars=settings.max_record_chars,
    )
    return DatasetPublic.from_row(dataset)
