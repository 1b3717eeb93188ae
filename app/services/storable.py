"""Text the stores can hold, checked before anything is inserted.

PostgreSQL refuses a NUL character (U+0000) in text and JSON, and neither database nor the
UTF-8 codec accepts an unpaired surrogate (U+D800..U+DFFF, which JSON's ``\\ud800`` escapes can
produce). Left to the insert, either fails deep in the driver with an error whose message and
parameters quote the records; checked here, the client gets a 422 naming the field, and the
check is the same on SQLite so that a dataset does not upload on one database and fail on the
other.

The same holds for size: PostgreSQL refuses a string longer than its ``String(n)`` column
(SQLite stores it anyway). The limits below are read from the columns themselves, so that a
validator never disagrees with the schema; ``tests/api/test_column_limits.py`` sends an
over-long value for every sized column a request can write.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import InstrumentedAttribute

from app.db.models import LABEL_MAX_CHARS as LABEL_MAX_CHARS  # its home: the model
from app.db.models import Dataset, Tenant


def column_size(column: InstrumentedAttribute[Any]) -> int:
    """The ``n`` of a ``String(n)`` column, e.g. ``column_size(Dataset.name)``."""
    length = getattr(column.type, "length", None)
    if not isinstance(length, int):
        raise TypeError(f"{column} is not a sized string column")
    return length


DATASET_NAME_MAX_CHARS = column_size(Dataset.name)
TENANT_NAME_MAX_CHARS = column_size(Tenant.name)


def too_long(what: str, length: int, limit: int) -> str | None:
    """Why a value of ``length`` characters does not fit ``limit`` (its column), or None.
    Says the sizes only: the value itself may be private."""
    if length <= limit:
        return None
    return f"{what} has {length} characters, more than the {limit} the database can store"


def text_problem(text: str, *, nul: bool = True) -> str | None:
    """Why ``text`` cannot be stored (``nul=False``: cannot be encoded), or None."""
    if nul and "\x00" in text:
        return "contains a NUL character (U+0000), which the database cannot store"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "contains an unpaired surrogate (U+D800..U+DFFF): not valid Unicode text"
    return None


def find_problem(value: Any, where: str, *, nul: bool = True) -> str | None:
    """The first string inside ``value`` (dict keys included) that cannot be stored, as
    ``"<where>[i].key: <problem>"``, or None. Iterative: bodies may nest deeply."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item, nul=nul)
            if problem:
                return f"{path}: {problem}"
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                if isinstance(key, str) and (problem := text_problem(key, nul=nul)):
                    return f"{path}: a key {problem}"
                name = str(key) if len(str(key)) <= 64 else f"{str(key)[:64]}..."
                stack.append((child, f"{path}.{name}" if path else name))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}[{i}]") for i, child in reversed(list(enumerate(item))))
    return None
