"""How ``dpsyn ... --help`` shows an on/off flag: its names only (``--public  --no-public``),
no type.

Typer's rich help prints every option's type beside its names, a flag's too (``--public
<bool>``), which reads as an option that takes a value: ``--public true`` then fails with
"unexpected extra argument". A flag takes no value, so its type is left out, as click's
plain help does; every other option keeps its type. Applied once, when :mod:`app.cli` is
imported, to the one class typer builds every option from (the built-in ``--help`` included).
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperOption

_typed_display = TyperOption.display_type_rich


def _display_type(option: TyperOption, ctx: Any) -> str | None:
    """An option's type as help shows it: none for a flag or a counter."""
    if option.is_flag or option.count:
        return None
    return _typed_display(option, ctx)


def show_flags_without_a_type() -> None:
    """Make every typer option's help show a flag as its names alone."""
    TyperOption.display_type_rich = _display_type  # type: ignore[method-assign,assignment]
