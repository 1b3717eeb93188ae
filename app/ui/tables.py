"""Server-side sorting and filtering of a dashboard table, from the page's query string.

A page declares its table once (:class:`TableSpec`: its sortable columns, its choice filters
and an optional text search) and calls :meth:`TableSpec.apply` with the request's query
parameters; the template gets a :class:`TableView` with the rows to show and the links that
sort and filter them (``app/ui/templates/_table.html`` has the macros). Everything happens on
the server, so a table sorts and filters without the page's script, and a link to a sorted,
filtered table can be bookmarked or shared.

The query string: ``sort=<column key>``, ``order=asc|desc``, one parameter per filter
(``<filter key>=<option>``; empty or absent: all rows) and ``q=<text>`` when the table has a
search. An unknown column, order or option is a 422 naming the parameter and what it takes
(never echoing the value, which a user typed); other parameters are ignored.

Sorting is stable: rows that compare equal keep the order the page gave them (e.g. newest
first), and a row whose value is missing (None) sorts last in either order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import urlencode

from app.services.errors import InvalidError

Row = TypeVar("Row")

MAX_SEARCH_CHARS = 200
ORDERS = ("asc", "desc")


@dataclass(frozen=True)
class Column(Generic[Row]):
    """A sortable column: its query key, its heading, and the value a row sorts by (None:
    missing, last). ``descending_first``: the first click sorts largest first (numbers)."""

    key: str
    label: str
    value: Callable[[Row], Any]
    descending_first: bool = False


@dataclass(frozen=True)
class Choice(Generic[Row]):
    """A filter with fixed options: rows whose ``value`` equals the chosen option stay."""

    key: str
    label: str
    options: Sequence[str]
    value: Callable[[Row], str | None]


@dataclass(frozen=True)
class TableSpec(Generic[Row]):
    """A table's sort keys, filters and search. ``default_sort`` None keeps the rows in the
    order given until the user picks a column."""

    columns: Sequence[Column[Row]]
    filters: Sequence[Choice[Row]] = ()
    search: Callable[[Row], str] | None = None
    default_sort: str | None = None
    default_order: str = "asc"

    def column(self, key: str) -> Column[Row]:
        return next(c for c in self.columns if c.key == key)

    def apply(self, rows: Sequence[Row], params: Mapping[str, str]) -> TableView[Row]:
        """The rows filtered and sorted as ``params`` (a request's query) asks."""
        sort, order = self._sorting(params)
        chosen = self._chosen(params)
        query = (params.get("q") or "").strip() if self.search is not None else ""
        if len(query) > MAX_SEARCH_CHARS:
            raise InvalidError(f"q: at most {MAX_SEARCH_CHARS} characters")
        kept = [
            row
            for row in rows
            if all(f.value(row) == chosen[f.key] for f in self.filters if f.key in chosen)
            and (not query or query.casefold() in _searched(self.search, row))
        ]
        if sort is not None:
            kept = _sorted(kept, self.column(sort).value, descending=order == "desc")
        return TableView(
            rows=kept,
            spec=self,
            sort=sort,
            order=order,
            chosen=chosen,
            query=query,
            total=len(rows),
        )

    def _sorting(self, params: Mapping[str, str]) -> tuple[str | None, str]:
        sort = params.get("sort") or self.default_sort
        keys = [c.key for c in self.columns]
        if sort is not None and sort not in keys:
            raise InvalidError(f"sort: one of {', '.join(keys)}")
        default = "desc" if sort is not None and self.column(sort).descending_first else "asc"
        if sort == self.default_sort:
            default = self.default_order
        order = params.get("order") or default
        if order not in ORDERS:
            raise InvalidError("order: asc or desc")
        return sort, order

    def _chosen(self, params: Mapping[str, str]) -> dict[str, str]:
        chosen = {}
        for choice in self.filters:
            value = params.get(choice.key) or ""
            if not value:
                continue
            if value not in choice.options:
                raise InvalidError(f"{choice.key}: one of {', '.join(choice.options)}")
            chosen[choice.key] = value
        return chosen


def _searched(search: Callable[[Any], str] | None, row: Any) -> str:
    return search(row).casefold() if search is not None else ""


def _sorted(rows: list[Row], value: Callable[[Row], Any], *, descending: bool) -> list[Row]:
    """Stable sort by ``value``, missing values (None) last whatever the order."""
    present = [row for row in rows if value(row) is not None]
    missing = [row for row in rows if value(row) is None]
    return sorted(present, key=value, reverse=descending) + missing


@dataclass(frozen=True)
class TableView(Generic[Row]):
    """What a template shows: the rows, and links that keep the other choices."""

    rows: list[Row]
    spec: TableSpec[Row]
    sort: str | None
    order: str
    chosen: dict[str, str] = field(default_factory=dict)
    query: str = ""
    total: int = 0

    @property
    def filtered(self) -> bool:
        return bool(self.chosen or self.query)

    def _params(self, **changes: str | None) -> str:
        params: dict[str, str | None] = {**self.chosen, "q": self.query or None}
        params.update(sort=self.sort, order=self.order if self.sort else None)
        params.update(changes)
        return "?" + urlencode({k: v for k, v in params.items() if v})

    def sort_href(self, key: str) -> str:
        """The link of a column's heading: sort by it, or reverse it if it is the sort."""
        if key == self.sort:
            return self._params(order="asc" if self.order == "desc" else "desc")
        first = "desc" if self.spec.column(key).descending_first else "asc"
        return self._params(sort=key, order=first)

    def arrow(self, key: str) -> str:
        if key != self.sort:
            return ""
        return " ▼" if self.order == "desc" else " ▲"

    def aria_sort(self, key: str) -> str:
        if key != self.sort:
            return "none"
        return "descending" if self.order == "desc" else "ascending"

    def value(self, key: str) -> str:
        """The chosen option of filter ``key`` ("" for all)."""
        return self.chosen.get(key, "")
