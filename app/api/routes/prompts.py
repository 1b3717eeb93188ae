"""Synthesised prompts (DP outputs, readable with a prompts:read key) and Stage 2."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from app.api.deps import AnyKey, ProviderDep, SessionDep
from app.api.schemas import (
    CompletionPublic,
    CompletionRequest,
    IdFilter,
    Limit,
    Offset,
    PromptPublic,
    PromptSummary,
)
from app.services import prompts as service

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
        session, principal.tenant_id, dataset_id=dataset_id, limit=limit, offset=offset
    )
    return [PromptSummary.from_row(row) for row in rows]


@router.get("/{prompt_id}", response_model=PromptPublic)
def get_prompt(prompt_id: str, principal: AnyKey, session: SessionDep) -> PromptPublic:
    return PromptPublic.from_row(service.get_prompt_set(session, principal.tenant_id, prompt_id))


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
            "ETag": {"description": "The file's SHA-256, quoted.", "schema": {"type": "string"}},
            "X-Content-SHA256": {
                "description": "The file's SHA-256 (hex), as in soft_prompt.sha256.",
                "schema": {"type": "string"},
            },
        },
    }
}


@router.get(
    "/{prompt_id}/soft-prompt",
    response_class=Response,
    responses=_SOFT_PROMPT_FILE,
    summary="Download the prompt's soft prompt (promptdpsgd) as a safetensors file",
)
def download_soft_prompt(prompt_id: str, principal: AnyKey, session: SessionDep) -> Response:
    file = service.get_soft_prompt_file(session, principal.tenant_id, prompt_id)
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
    session: SessionDep,
    provider: ProviderDep,
) -> CompletionPublic:
    source = service.PromptSource.from_row(
        service.get_prompt_set(session, principal.tenant_id, prompt_id)
    )
    session.rollback()  # hold no transaction (SQLite: no write lock) while the model runs
    result = service.complete(source, body.query, provider)
    return CompletionPublic(
        prompt_id=source.id,
        kind=result.kind.value,
        label=result.label,
        scores=result.scores,
        value=result.value,
    )
