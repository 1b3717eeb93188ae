"""What every body shares: strict numbers, paging, the request base that refuses what the
stores cannot hold, the error body (OpenAI's shape too), health."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from fastapi import Query
from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    model_validator,
)

from app.db.models import (
    as_utc,
)
from app.documented import Documented
from app.services.storable import DATASET_NAME_MAX_CHARS, find_problem

Timestamp = Annotated[datetime, AfterValidator(as_utc)]
# Numbers are strict: JSON true is not an epsilon of 1, nor "2" a count of 2 (see Epsilon).
Delta = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False, strict=True)]
Name = Annotated[str, Field(min_length=1, max_length=DATASET_NAME_MAX_CHARS)]  # its column's
ResourceId = Annotated[str, Field(min_length=1, max_length=128)]  # IDs are 32 hex digits
# Paging: a page of at most 500; an offset the databases' 64-bit integers can hold.
MAX_OFFSET = 2**63 - 1
Limit = Annotated[int, Query(ge=1, le=500)]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
IdFilter = Annotated[str | None, Query(max_length=128)]
COLUMN_NAME_MAX_CHARS = 200  # a header name the readers look up; never stored
Column = Annotated[str, Field(min_length=1, max_length=COLUMN_NAME_MAX_CHARS)]


class _Request(Documented):
    """A request body: unknown fields are refused, and so is any string the stores cannot
    hold (NUL, unpaired surrogates), wherever it sits, before a route sees it."""

    model_config = ConfigDict(extra="forbid")
    stored: ClassVar[bool] = True  # False: never stored, so NUL is harmless (still UTF-8)

    @model_validator(mode="after")
    def _storable(self) -> Any:
        for name in type(self).model_fields:
            problem = find_problem(getattr(self, name), name, nul=self.stored)
            if problem:
                raise ValueError(problem)
        return self


class ErrorDetail(Documented):
    code: str
    message: str
    type: str
    """OpenAI's error type for the status (not_found_error, ...)."""
    param: str | None = None
    """The request field at fault, where one is."""


class ErrorBody(Documented):
    error: ErrorDetail


# --- health ---------------------------------------------------------------------------------


class Health(Documented):
    status: Literal["ok"]
    database: Literal["reachable"]
