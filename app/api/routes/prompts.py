"""Synthesised prompts (DP outputs, readable with a prompts:read key) and Stage 2.

``GET /v1/prompts/{id}`` is what downstream apps call without limit. A prompt set
never changes once stored, so its serialised body is built once and kept, per (tenant,
prompt ID), in a bounded in-process LRU (:data:`PROMPT_CACHE_SIZE` bodies, none over
:data:`PROMPT_CACHE_MAX_BYTES`), with a strong ETag (the body's SHA-256): a cached read costs
no thread hop, no query and no serialisation, and a client that sends the ETag back in
``If-None-Match`` gets 304 without the body. Only a successful read fills the cache, under the
caller's tenant: another tenant asking for the same ID misses and gets the database's 404.
One part of a prompt set is written after it: the score on its job's validation set. A body
whose validation is still ``pending`` is served but never cached, so the read after the
worker writes the score has it (and a new ETag: the old one then gets the new body, not 304).
The soft-prompt download answers 304 the same way (its ETag, the file's SHA-256, is kept too).
``?format=messages`` answers the prompt as chat messages (:mod:`dpsyn_client.chat`, the
rendering the downstream client does locally), cached and tagged as a body of its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from dpsyn_client.chat import NoChatFormError, chat_messages
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from app.api.deps import AnyKey, ProviderDep, SessionDep
from app.api.engine_gate import EngineSlot
from app.api.responses import json_bytes
from app.api.schemas import (
    CompletionPublic,
    CompletionRequest,
    IdFilter,
    Limit,
    Offset,
    PromptFormat,
    PromptFormatQuery,
    PromptMessagesPublic,
    PromptPublic,
    PromptSummary,
)
from app.db.models import PromptSet
from app.services import prompts as service
from app.services.datasets import resolve_ref
from app.services.errors import ConflictError
from app.services.jobs import dataset_names
from app.services.key_cache import LruCache

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1/prompts", tags=["prompts"])


@router.get("", response_model=list[PromptSummary])
def list_prompts(
    principal: AnyKey,
    session: SessionDep,
    dataset_id: IdFilter = None,
    limit: Limit = 100,
    offset: Offset = 0,
) -> list[PromptSummary]:
    rows = service.list_prompt_sets(
        session,
        principal.tenant_id,
        dataset_id=resolve_ref(session, principal.tenant_id, dataset_id) if dataset_id else None,
        limit=limit,
        offset=offset,
    )
    names = dataset_names(session, principal.tenant_id, [row.dataset_id for row in rows])
    return [PromptSummary.from_row(row, names.get(row.dataset_id)) for row in rows]


#: The prompt bodies (and soft-prompt ETags) kept per process: at most this many bytes in
#: all (a read mix over 3,000 prompts thrashed a cache of 1,024 entries: bench/load.py --mix),
#: at most this many entries, and no body over the last bound.
PROMPT_CACHE_BYTES = 64 << 20
PROMPT_CACHE_SIZE = 100_000
PROMPT_CACHE_MAX_BYTES = 1 << 20

_NOT_MODIFIED: dict[int | str, dict[str, Any]] = {
    304: {"description": "Not modified: the ETag sent in If-None-Match is current."}
}


@dataclass(frozen=True)
class CachedBody:
    """A prompt's response body, serialised as FastAPI would, and its strong ETag; ``final``
    unless a validation score is still to be written (such a body is not cached)."""

    data: bytes
    etag: str
    final: bool = True


def prompt_cache(app: FastAPI) -> LruCache[tuple[str, str, str], Any]:
    """The app's cache, keyed by (what, tenant, prompt ID); one per app, never shared."""
    cache: LruCache[tuple[str, str, str], Any] | None = getattr(app.state, "prompt_cache", None)
    if cache is None:
        cache = app.state.prompt_cache = LruCache(
            PROMPT_CACHE_SIZE, weigh=_weight, max_weight=PROMPT_CACHE_BYTES
        )
    return cache


def _weight(value: Any) -> int:
    """Bytes a cached value holds (a body, or a soft prompt's ETag), with its key's share."""
    return 200 + (len(value.data) if isinstance(value, CachedBody) else len(str(value)))


def etag_matches(request: Request, etag: str) -> bool:
    """Whether ``If-None-Match`` names ``etag`` (weak comparison, as RFC 9110 asks, or ``*``)."""
    return tags_match(request.headers.get("if-none-match", ""), etag)


def tags_match(header: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` value names ``etag`` (also read by the fast path,
    ``app.api.prompt_reads``)."""
    if not header:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or etag in tags


def _not_modified(etag: str) -> Response:
    return Response(status_code=304, headers={"ETag": etag})


def _load_body(sessions: sessionmaker[Session], tenant_id: str, prompt_id: str) -> CachedBody:
    """Read and serialise the prompt (a 404 for another tenant's), on a session of its own."""
    with sessions() as session:
        return _body_of(session, service.get_prompt_set(session, tenant_id, prompt_id))


def _body_of(session: Session, row: PromptSet) -> CachedBody:
    notes, count = service.prompt_notes(session, row), service.demonstration_count(session, row)
    model = PromptPublic.from_row(row, notes=notes, count=count)
    final = service.validation_is_final(row.validation)
    # The bytes JSONResponse would render for this model (a non-finite number as null).
    data = json_bytes(model.model_dump(mode="json"))
    return CachedBody(data, f'"{hashlib.sha256(data).hexdigest()}"', final)


#: Prompt sets read per query by :func:`preload_prompts` (each batch on a thread of its own,
#: so that requests interleave with the loading).
PRELOAD_BATCH = 200


async def preload_prompts(app: FastAPI, limit: int) -> None:
    """Fill the prompt cache with the newest ``limit`` prompt sets when the process starts
    (``DPSYN_PROMPT_PRELOAD``), stopping early when the cache is full: a prompt set never
    changes once final, so its body is the one a read would cache, and downstream reads of
    prompts made before the start cost no query. A failure (the database down) stops the
    loading, logged by kind; reads then fill the cache as before."""
    cache, offset = prompt_cache(app), 0
    while offset < limit and cache.weight < 0.9 * (cache.max_weight or 0):
        try:
            loaded = await run_in_threadpool(
                _load_batch, app.state.read_sessions, offset, min(PRELOAD_BATCH, limit - offset)
            )
        except SQLAlchemyError as error:
            log.warning("prompt preload stopped (%s)", type(error).__name__)
            return
        for (tenant_id, prompt_id), body in loaded:
            if body.final and len(body.data) <= PROMPT_CACHE_MAX_BYTES:
                cache.put(("body", tenant_id, prompt_id), body)
        if len(loaded) < PRELOAD_BATCH:
            return
        offset += len(loaded)


def _load_batch(
    sessions: sessionmaker[Session], offset: int, limit: int
) -> list[tuple[tuple[str, str], CachedBody]]:
    with sessions() as session:
        rows = service.newest_prompt_sets(session, offset=offset, limit=limit)
        return [((row.tenant_id, row.id), _body_of(session, row)) for row in rows]


async def _prompt_body(request: Request, tenant_id: str, prompt_id: str) -> CachedBody:
    """The prompt's JSON body: from the cache, else read (and cached once final)."""
    cache, key = prompt_cache(request.app), ("body", tenant_id, prompt_id)
    body: CachedBody | None = cache.get(key)
    if body is None:
        body = await run_in_threadpool(
            _load_body, request.app.state.read_sessions, tenant_id, prompt_id
        )
        if body.final and len(body.data) <= PROMPT_CACHE_MAX_BYTES:
            cache.put(key, body)
    return body


def _messages_body(body: CachedBody) -> CachedBody:
    """The prompt as chat messages, rendered by :func:`dpsyn_client.chat.chat_messages` from
    its JSON (the rendering the downstream client does locally), with an ETag of its own; a
    409 for a soft prompt. Final even if the prompt's score is pending: the messages do not
    hold it."""
    prompt = json.loads(body.data)
    try:
        messages = chat_messages(prompt)
    except NoChatFormError as err:
        raise ConflictError(str(err), code="no_chat_form") from None
    model = PromptMessagesPublic.model_validate({"prompt_id": prompt["id"], "messages": messages})
    data = json_bytes(model.model_dump(mode="json"))
    return CachedBody(data, f'"{hashlib.sha256(data).hexdigest()}"')


async def _messages(request: Request, tenant_id: str, prompt_id: str) -> CachedBody:
    cache, key = prompt_cache(request.app), ("messages", tenant_id, prompt_id)
    messages: CachedBody | None = cache.get(key)
    if messages is None:
        messages = _messages_body(await _prompt_body(request, tenant_id, prompt_id))
        if len(messages.data) <= PROMPT_CACHE_MAX_BYTES:
            cache.put(key, messages)
    return messages


@router.get(
    "/{prompt_id}",
    response_model=PromptPublic | PromptMessagesPublic,
    responses=_NOT_MODIFIED,
    summary="Read a prompt (format=text: its JSON; format=messages: chat messages)",
)
async def get_prompt(
    prompt_id: str,
    principal: AnyKey,
    request: Request,
    output: PromptFormatQuery = PromptFormat.TEXT,
) -> Response:
    if output is PromptFormat.MESSAGES:
        body = await _messages(request, principal.tenant_id, prompt_id)
    else:
        body = await _prompt_body(request, principal.tenant_id, prompt_id)
    if etag_matches(request, body.etag):
        return _not_modified(body.etag)
    return Response(body.data, media_type="application/json", headers={"ETag": body.etag})


# The download's success response: the file, and the headers that identify it.
_SOFT_PROMPT_FILE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The soft prompt as a safetensors file (tensor ``soft_prompt``, "
        "``length x hidden`` float32; the model's name in its metadata).",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        "headers": {
            "Content-Disposition": {
                "description": "attachment; filename=<prompt id>.safetensors",
                "schema": {"type": "string"},
            },
            "ETag": {
                "description": "The file's SHA-256, quoted; send it back in If-None-Match "
                "for a 304.",
                "schema": {"type": "string"},
            },
            "X-Content-SHA256": {
                "description": "The file's SHA-256 (hex), as in soft_prompt.sha256.",
                "schema": {"type": "string"},
            },
        },
    },
    **_NOT_MODIFIED,
}


def _load_soft_prompt(
    sessions: sessionmaker[Session], tenant_id: str, prompt_id: str
) -> service.SoftPromptFile:
    with sessions() as session:
        return service.get_soft_prompt_file(session, tenant_id, prompt_id)


@router.get(
    "/{prompt_id}/soft-prompt",
    response_class=Response,
    responses=_SOFT_PROMPT_FILE,
    summary="Download the prompt's soft prompt (promptdpsgd) as a safetensors file",
)
async def download_soft_prompt(prompt_id: str, principal: AnyKey, request: Request) -> Response:
    cache, key = prompt_cache(request.app), ("soft-etag", principal.tenant_id, prompt_id)
    known: str | None = cache.get(key)  # a revalidation needs no read of the file
    if known is not None and etag_matches(request, known):
        return _not_modified(known)
    file = await run_in_threadpool(
        _load_soft_prompt, request.app.state.read_sessions, principal.tenant_id, prompt_id
    )
    cache.put(key, f'"{file.sha256}"')
    if etag_matches(request, f'"{file.sha256}"'):
        return _not_modified(f'"{file.sha256}"')
    return Response(
        content=file.data,
        media_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{file.filename}"',
            "ETag": f'"{file.sha256}"',
            "X-Content-SHA256": file.sha256,
        },
    )


@router.post(
    "/{prompt_id}/complete",
    response_model=CompletionPublic,
    response_model_exclude_none=True,
    summary="Answer a query with the prompt (classification: label scores; extraction: value)",
)
def complete(
    prompt_id: str,
    body: CompletionRequest,
    principal: AnyKey,
    slot: EngineSlot,
    session: SessionDep,
    provider: ProviderDep,
) -> CompletionPublic:
    source = service.PromptSource.from_row(
        service.get_prompt_set(session, principal.tenant_id, prompt_id)
    )
    session.rollback()  # hold no transaction (SQLite: no write lock) while the model runs
    slot.enter()
    result = service.complete(source, body.query, provider, calibrated=body.calibrated)
    return CompletionPublic(
        prompt_id=source.id,
        kind=result.kind.value,
        label=result.label,
        scores=result.scores,
        calibration=result.calibration,
        value=result.value,
    )
