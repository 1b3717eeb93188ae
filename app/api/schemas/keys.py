"""API key bodies: creating one, the key views (with last use and usage)."""

from __future__ import annotations

from pydantic import (
    Field,
    field_validator,
)

from app.api.schemas.common import Timestamp, _Request
from app.db.models import (
    ApiKey,
    KeyScope,
)
from app.documented import Documented
from app.services.tenants import KEY_NAME_MAX_CHARS, key_name_problem

# --- keys -----------------------------------------------------------------------------------


class KeyCreate(_Request):
    scope: KeyScope = KeyScope.PROMPTS_READ
    """admin or prompts:read; org:read keys are created by the operator only (a 403 here)."""
    name: str | None = Field(
        None,
        description=f"What the key is for (trimmed; 1 to {KEY_NAME_MAX_CHARS} printable "
        "characters). Shown in key lists; optional.",
        json_schema_extra={"maxLength": KEY_NAME_MAX_CHARS},
    )

    @field_validator("name")
    @classmethod
    def _trimmed_name(cls, value: str | None) -> str | None:
        """Trimmed, and refused with the rule (never the value) if blank, too long for its
        column, or holding a control character."""
        if value is None:
            return None
        problem = key_name_problem(value.strip())
        if problem:
            raise ValueError(problem)
        return value.strip()


class KeyPublic(Documented):
    id: str
    scope: str
    created_at: Timestamp
    revoked: bool
    name: str | None = None
    """The name given at creation (null: none)."""
    last_used_at: Timestamp | None = None
    """When the key last opened the API or the dashboard, to within a minute (written at most
    once a minute per key); null: not used since names were added."""
    usage_requests: int = 0
    """Answers the key asked for through the OpenAI-compatible endpoint."""
    usage_prompt_tokens: int = 0
    """Their prompt tokens (the DP prompt's too)."""
    usage_completion_tokens: int = 0
    """Their answers' tokens."""

    @classmethod
    def from_row(cls, row: ApiKey) -> KeyPublic:
        return cls.model_validate(row, from_attributes=True)


class KeyCreated(KeyPublic):
    key: str
    """The raw key: shown only now, store it safely."""
