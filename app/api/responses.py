"""JSON bodies that are always JSON: a non-finite number becomes null.

JSON has no infinity or NaN, and Starlette's ``JSONResponse`` refuses them (``allow_nan=False``:
the request ends in a 500). A number can be non-finite honestly: a composed spend at a delta
so small that no finite epsilon covers it, a score of a label the model cannot produce. Such
a number is written as null, as Pydantic writes the response models (FastAPI's serialisation
of a ``response_model``), so a client sees one convention everywhere; a message in words says
what null stands for where it matters. Error bodies (``app.api.errors.error_response``), the
dashboard's JSON answers and the cached prompt bodies are rendered here.
"""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi.responses import JSONResponse


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (at any depth of dicts, lists and tuples)
    replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def _dumps(content: Any) -> bytes:
    # Starlette's JSONResponse.render, byte for byte.
    return json.dumps(
        content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


def json_bytes(content: Any) -> bytes:
    """``content`` as JSON, non-finite numbers as null. Finite content (nearly all) is
    rendered once, as ``JSONResponse`` renders it; only a refusal walks it."""
    try:
        return _dumps(content)
    except ValueError:  # out-of-range float values
        return _dumps(finite(content))


class FiniteJSONResponse(JSONResponse):
    """A ``JSONResponse`` that writes a non-finite number as null instead of failing."""

    def render(self, content: Any) -> bytes:
        return json_bytes(content)
