"""Models whose fields are documented by a docstring under each one, as vLLM documents its
configs: the declaration stays on one line and the reason reads as prose beneath it.

Pydantic takes such a docstring as the field's description (``use_attribute_docstrings``), so
the API's schema, the generated command-line help and the forms show it as before; a docstring
wrapped over several lines becomes one line there (:func:`one_line_descriptions`), as the
concatenated strings of ``Field(description=...)`` did.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


def one_line_descriptions(model: type[BaseModel]) -> None:
    """Join the lines of each field description of ``model`` (a wrapped docstring) with
    single spaces, and rebuild its schema if any changed."""
    changed = False
    for field in model.model_fields.values():
        if field.description and "\n" in field.description:
            field.description = " ".join(field.description.split())
            changed = True
    if changed:
        model.model_rebuild(force=True)


class Documented(BaseModel):
    """A model whose fields' docstrings are their descriptions (one line each)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        one_line_descriptions(cls)
