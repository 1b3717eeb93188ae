"""Errors of the service layer, each with the HTTP status and code the API answers with.

Messages are shown to clients as they are: they name the problem (a field, a limit, an id)
and never contain private record text. ``extra`` adds machine-readable details to the error
body (for example the remaining budget).
"""

from __future__ import annotations

from typing import Any, ClassVar


class ServiceError(Exception):
    status: ClassVar[int] = 400
    code: ClassVar[str] = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.error_code = code or self.code
        self.extra = extra


class UnauthorizedError(ServiceError):
    status, code = 401, "unauthorized"


class ForbiddenError(ServiceError):
    status, code = 403, "forbidden"


class NotFoundError(ServiceError):
    status, code = 404, "not_found"


class ConflictError(ServiceError):
    status, code = 409, "conflict"


class TooLargeError(ServiceError):
    status, code = 413, "too_large"


class UnsupportedMediaTypeError(ServiceError):
    status, code = 415, "unsupported_media_type"


class InvalidError(ServiceError):
    status, code = 422, "invalid"


class TooManyError(ServiceError):
    """A tenant's own share of some queue is full (429, with ``retry_after_s``)."""

    status, code = 429, "too_many"


class UnavailableError(ServiceError):
    status, code = 503, "unavailable"
