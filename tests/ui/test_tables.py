"""The reusable server-side table helper (app/ui/tables.py): stable sorting with missing
values last, choice filters and search, links that keep the other choices, and a 422 naming
the parameter for a value it does not know."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from app.services.errors import InvalidError
from app.ui.tables import Choice, Column, TableSpec, TableView

ROWS = [
    {"name": "delta", "kind": "a", "size": 3},
    {"name": "Alpha", "kind": "b", "size": None},
    {"name": "charlie", "kind": "a", "size": 1},
    {"name": "bravo", "kind": "a", "size": 3},
]
SPEC: TableSpec[dict] = TableSpec(
    columns=[
        Column("name", "Name", lambda r: r["name"].casefold()),
        Column("size", "Size", lambda r: r["size"], descending_first=True),
    ],
    filters=[Choice("kind", "Kind", ("a", "b"), lambda r: r["kind"])],
    search=lambda r: r["name"],
)


def names(view: TableView[dict]) -> list[str]:
    return [r["name"] for r in view.rows]


def test_no_sort_keeps_the_given_order() -> None:
    view = SPEC.apply(ROWS, {})
    assert names(view) == ["delta", "Alpha", "charlie", "bravo"]
    assert view.sort is None and view.arrow("name") == "" and view.aria_sort("name") == "none"


def test_sorting_is_stable_and_puts_missing_values_last() -> None:
    assert names(SPEC.apply(ROWS, {"sort": "size", "order": "desc"})) == [
        "delta",
        "bravo",
        "charlie",
        "Alpha",
    ]
    assert names(SPEC.apply(ROWS, {"sort": "size", "order": "asc"})) == [
        "charlie",
        "delta",
        "bravo",
        "Alpha",
    ]
    assert names(SPEC.apply(ROWS, {"sort": "name"})) == ["Alpha", "bravo", "charlie", "delta"]


def test_filters_and_search() -> None:
    assert names(SPEC.apply(ROWS, {"kind": "b"})) == ["Alpha"]
    view = SPEC.apply(ROWS, {"kind": "a", "q": "AR", "sort": "name"})
    assert names(view) == ["charlie"] and view.filtered and view.total == 4
    assert names(SPEC.apply(ROWS, {"kind": ""})) == names(SPEC.apply(ROWS, {}))


def test_links_flip_the_sort_and_keep_the_filters() -> None:
    view = SPEC.apply(ROWS, {"kind": "a", "q": "o", "sort": "name", "order": "asc"})
    assert view.arrow("name") == " ▲" and view.aria_sort("name") == "ascending"
    flip = parse_qs(view.sort_href("name")[1:])
    assert flip == {"kind": ["a"], "q": ["o"], "sort": ["name"], "order": ["desc"]}
    other = parse_qs(view.sort_href("size")[1:])
    assert other["sort"] == ["size"] and other["order"] == ["desc"]  # numbers: largest first
    assert other["kind"] == ["a"] and other["q"] == ["o"]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"sort": "secret"}, "sort: one of name, size"),
        ({"order": "sideways", "sort": "name"}, "order: asc or desc"),
        ({"kind": "z"}, "kind: one of a, b"),
        ({"q": "x" * 201}, "q: at most 200"),
    ],
)
def test_unknown_values_are_refused_by_name(params: dict, named: str) -> None:
    with pytest.raises(InvalidError) as refused:
        SPEC.apply(ROWS, params)
    assert refused.value.status == 422
    assert str(refused.value.message).startswith(named)
    assert "secret" not in refused.value.message and "sideways" not in refused.value.message
