"""How the ``dpsyn`` commands report a problem: one line on stderr, exit status 2."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from pydantic import ValidationError
from rich.console import Console

from app.llm.base import BackendError
from app.privacy.calibration import CalibrationError
from app.results import SynthesisError
from app.synthesis.data import DataError
from app.synthesis.tasks import TaskError

err = Console(stderr=True)

# Errors whose messages name the problem for the user (and never carry record text).
USER_ERRORS: tuple[type[Exception], ...] = (
    DataError,
    TaskError,
    SynthesisError,
    CalibrationError,
    BackendError,
    FileNotFoundError,
    ValueError,
)


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` on one line; the caller raises the returned Exit."""
    err.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


@contextmanager
def reported_errors() -> Iterator[None]:
    """Turn validation and user errors raised inside the block into a one-line exit."""
    try:
        yield
    except ValidationError as error:
        first = error.errors()[0]
        raise fail(f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    except USER_ERRORS as error:
        raise fail(str(error)) from None
