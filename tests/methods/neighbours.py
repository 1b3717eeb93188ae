"""What a method's stored job row holds, for the neighbour tests of each method: the
contract's :func:`app.contract.stored_row`."""

from __future__ import annotations

from app.contract import stored_row

__all__ = ["stored_row"]
