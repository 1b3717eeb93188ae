"""No charge changed with issue 35's primitive events: today's stored events, read by the
current code, cost exactly what the code before the refactor charged (recorded in
``data/golden_charges.json`` by ``golden_charges.py``, on commit 9e42447).

The stored JSON is the very form ledger rows hold (``app.privacy.events.to_dict`` of the
code of that commit), so this is also the proof that old rows stay readable and price alike.
"""

from __future__ import annotations

import json
import math
from functools import cache
from typing import Any

import pytest

from app.privacy.accounting import Accounting, UnsupportedEventError, accountant_for
from app.privacy.events import from_dict, to_dict
from app.privacy.filter import FilterParams, Item
from app.services.budgets import label_groups
from tests.privacy.golden_charges import PATH

REL = 1e-9  # the ledger's own tolerance (app.privacy.budget.FIT_TOLERANCE)


@cache
def golden() -> dict[str, Any]:
    return json.loads(PATH.read_text())


def _same(ours: list[float], recorded: list[Any]) -> None:
    for value, want in zip(ours, recorded, strict=True):
        if want == "inf":
            assert value == math.inf
        else:
            assert value == pytest.approx(want, rel=REL, abs=0.0)


def _check(accounting: Accounting, events: list[Any], recorded: dict[str, Any]) -> None:
    accountant = accountant_for(accounting)
    deltas = golden()["deltas"]
    if recorded.get("refused"):
        with pytest.raises(UnsupportedEventError):
            accountant.dataset_epsilon(events, deltas[0])
        return
    _same([accountant.dataset_epsilon(events, d) for d in deltas], recorded["epsilon"])


@pytest.mark.parametrize("name", sorted(golden()["jobs"]))
@pytest.mark.parametrize("accounting", list(Accounting))
def test_each_stored_job_costs_what_it_cost(name, accounting):
    job = golden()["jobs"][name]
    event = from_dict(job["event"])
    _check(accounting, [event], job[accounting.value])


@pytest.mark.parametrize("name", sorted(golden()["jobs"]))
def test_a_stored_job_is_written_back_as_it_was_stored(name):
    stored = golden()["jobs"][name]["event"]
    assert to_dict(from_dict(stored)) == stored


@pytest.mark.parametrize("name", sorted(golden()["ledgers"]))
@pytest.mark.parametrize("accounting", list(Accounting))
def test_each_ledger_composes_to_what_it_did(name, accounting):
    ledger = golden()["ledgers"][name]
    events = [from_dict(golden()["jobs"][job]["event"]) for job in ledger["jobs"]]
    _check(accounting, events, ledger[accounting.value])


@pytest.mark.parametrize("name", sorted(golden()["ledgers"]))
@pytest.mark.parametrize("accounting", list(Accounting))
def test_each_label_group_spends_what_it_did(name, accounting):
    """Each label group's tight composition (``composed``, what the ledger charged before
    its filter, and what the filter's one-batch rule builds on) is what it was; the filter's
    own prices are checked in tests/privacy/test_filter.py."""
    ledger = golden()["ledgers"][name]
    recorded = ledger["groups"][accounting.value]
    events = [from_dict(golden()["jobs"][job]["event"]) for job in ledger["jobs"]]
    labels = ["a", "b", "c", "unread"]
    params = FilterParams.for_budget(10.0, golden()["deltas"][0])
    items = [Item(event, f"job{i}") for i, event in enumerate(events)]
    if recorded is None:
        with pytest.raises(UnsupportedEventError):
            label_groups(accounting, params, items, labels)
        return
    groups = label_groups(accounting, params, items, labels)
    assert [[list(g.labels), g.jobs] for g in groups] == [[r[0], r[2]] for r in recorded]
    _same([g.composed for g in groups], [r[1] for r in recorded])
