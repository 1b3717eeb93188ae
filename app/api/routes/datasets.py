"""Upload, list, read and delete datasets, private or public (metadata only ever leaves), and
the owner's declaration that a private dataset's label counts are public."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from sqlalchemy.orm import Session
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException

from app.api.deps import AdminKey, DatasetRef, Principal, SessionDep, SettingsDep
from app.api.schemas import (
    UPLOAD_OPENAPI,
    CountsPublicUpdate,
    DatasetCreate,
    DatasetPublic,
    DatasetUploadForm,
    Limit,
    Offset,
    RecordReadPublic,
)
from app.api.uploads import budget_of_ref, store_file_upload
from app.services import datasets as service
from app.services import record_reads
from app.services.errors import InvalidError, ServiceError, UnsupportedMediaTypeError
from app.services.fingerprints import fingerprint_key
from app.settings import Settings

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])

# Room for the multipart boundaries and the small form fields around the file.
_FORM_OVERHEAD = 64 * 1024


class _LimitedReceive:
    """The request's body stream, cut off with a 413 once it passes ``limit`` bytes."""

    def __init__(self, request: Request, limit: int) -> None:
        self._receive, self._limit, self._seen = request.receive, limit, 0

    async def __call__(self) -> Any:
        message = await self._receive()
        if message["type"] == "http.request":
            self._seen += len(message.get("body", b""))
            if self._seen > self._limit:
                raise service.too_large(self._limit - _FORM_OVERHEAD)
        return message


def _validation_error(err: ValidationError) -> RequestValidationError:
    return RequestValidationError(
        [{**e, "loc": ("body", *e["loc"])} for e in err.errors(include_input=False)]
    )


@router.post(
    "",
    status_code=201,
    response_model=DatasetPublic,
    openapi_extra=UPLOAD_OPENAPI,
    summary="Upload a dataset (multipart CSV/TSV/JSONL file, or a JSON body)",
)
async def upload_dataset(
    request: Request, principal: AdminKey, session: SessionDep, settings: SettingsDep
) -> DatasetPublic:
    limit = settings.max_upload_bytes
    length = request.headers.get("content-length")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        if length and length.isdigit() and int(length) > limit + _FORM_OVERHEAD:
            raise service.too_large(limit)
        limited = Request(request.scope, _LimitedReceive(request, limit + _FORM_OVERHEAD))
        try:
            form = await limited.form(max_files=1, max_fields=12)
        except MultiPartException as err:
            raise InvalidError(f"invalid multipart body: {err.message}") from None
        try:
            upload = form.get("file")
            fields = {k: v for k, v in form.items() if k != "file" and isinstance(v, str)}
            fields = _with_query_budget_of(fields, request)
            try:
                meta = DatasetUploadForm.model_validate(fields)
            except ValidationError as err:
                raise _validation_error(err) from None
            if not isinstance(upload, UploadFile):
                raise InvalidError("file: a multipart upload needs a file part named 'file'")
            return await run_in_threadpool(
                store_file_upload, session, settings, principal, meta, upload
            )
        finally:
            await form.close()
    if content_type == "application/json":
        if length and length.isdigit() and int(length) > limit:
            raise service.too_large(limit)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise service.too_large(limit)
        try:
            payload = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise InvalidError("body: not valid JSON") from None
        except RecursionError:
            raise ServiceError("body: JSON nested too deeply", code="invalid_json") from None
        if isinstance(payload, dict):
            payload = _with_query_budget_of(payload, request)
        try:
            meta_json = DatasetCreate.model_validate(payload)
        except ValidationError as err:
            raise _validation_error(err) from None
        return await run_in_threadpool(_from_json, session, settings, principal, meta_json)
    raise UnsupportedMediaTypeError(
        "Content-Type: send multipart/form-data (a file) or application/json (records)"
    )


def _with_query_budget_of(fields: dict[str, Any], request: Request) -> dict[str, Any]:
    """The body's fields with ``?budget_of=`` (a query field, as the body's) added; both
    given and different: 422."""
    query = request.query_params.get("budget_of")
    if query is None:
        return fields
    if fields.get("budget_of") not in (None, query):
        raise InvalidError("budget_of: given twice (query and body) with different values")
    return {**fields, "budget_of": query}


def _from_json(
    session: Session, settings: Settings, principal: Principal, meta: DatasetCreate
) -> DatasetPublic:
    dataset = service.store_upload(
        session,
        tenant_id=principal.tenant_id,
        name=meta.name,
        task=meta.task,
        public=meta.public,
        labelled=meta.labelled,
        counts_public=meta.counts_public,
        declared_by=principal.key_id,
        budget_of=budget_of_ref(session, principal, meta.budget_of),
        fingerprint_key=fingerprint_key(settings),
        write=service.jsonl_writer(meta.records),
        suffix=".jsonl",
        text_column=meta.text_column,
        label_column=meta.label_column,
        display_name="records",
        max_records=settings.max_records,
        max_record_chars=settings.max_record_chars,
    )
    return DatasetPublic.from_row(dataset)


@router.get("", response_model=list[DatasetPublic])
def list_datasets(
    principal: AdminKey,
    session: SessionDep,
    include_deleted: bool = False,
    limit: Limit = 100,
    offset: Offset = 0,
) -> list[DatasetPublic]:
    rows = service.list_datasets(
        session, principal.tenant_id, include_deleted=include_deleted, limit=limit, offset=offset
    )
    return [DatasetPublic.from_row(row) for row in rows]


@router.get("/{dataset_id}", response_model=DatasetPublic)
def get_dataset(dataset_id: DatasetRef, principal: AdminKey, session: SessionDep) -> DatasetPublic:
    return DatasetPublic.from_row(service.get_dataset(session, principal.tenant_id, dataset_id))


@router.get(
    "/{dataset_id}/reads",
    response_model=list[RecordReadPublic],
    summary="Who read the dataset's records: each read by a job, advice run or validation, "
    "with the process and time (the latest first; never a record)",
)
def get_reads(
    dataset_id: DatasetRef,
    principal: AdminKey,
    session: SessionDep,
    limit: Limit = 100,
    offset: Offset = 0,
) -> list[RecordReadPublic]:
    """Read by the keys that read the dataset's ledger (admin keys of its tenant); another
    tenant's dataset is not found."""
    service.get_dataset(session, principal.tenant_id, dataset_id)
    rows = record_reads.list_reads(session, dataset_id, limit=limit, offset=offset)
    return [RecordReadPublic.from_row(row) for row in rows]


@router.put(
    "/{dataset_id}/counts-public",
    response_model=DatasetPublic,
    summary="Declare the private dataset's label counts public, or withdraw it (audited)",
)
def put_counts_public(
    dataset_id: DatasetRef, body: CountsPublicUpdate, principal: AdminKey, session: SessionDep
) -> DatasetPublic:
    """Jobs admitted from now on plan with the exact counts and release none (public: true),
    or release the counts they plan with under DP again (false); jobs already admitted keep
    theirs. The dataset records when and by which key (``counts_public_at``, ``_by``)."""
    dataset = service.set_counts_public(
        session, principal.tenant_id, dataset_id, public=body.public, key_id=principal.key_id
    )
    return DatasetPublic.from_row(dataset)


@router.delete(
    "/{dataset_id}",
    response_model=DatasetPublic,
    summary="Delete the records (the dataset row and its ledger stay)",
)
def delete_dataset(
    dataset_id: DatasetRef, principal: AdminKey, session: SessionDep
) -> DatasetPublic:
    return DatasetPublic.from_row(service.delete_dataset(session, principal.tenant_id, dataset_id))
