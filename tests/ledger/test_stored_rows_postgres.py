"""Ledger rows as the code before issue 35's primitive events wrote them still load and
price alike: the exact JSON of ``tests/privacy/data/golden_charges.json`` (recorded on the
code of that time) is inserted as reserve rows, and the ledger's spend is what it was."""

from __future__ import annotations

import pytest

from app.db.models import Budget, Dataset, LedgerEntry, LedgerKind, Tenant, new_id
from app.db.session import session_scope
from app.ledger import ledger
from app.privacy.accounting import Accounting
from tests.privacy.test_golden_charges import REL, golden


@pytest.mark.parametrize("name", ["tight-mixed", "paper-mixed", "paper-pairs"])
def test_rows_written_before_the_primitives_price_as_they_did(postgres_url, name):
    recorded = golden()["ledgers"][name]
    accounting = Accounting.TIGHT if name.startswith("tight") else Accounting.PAPER
    delta = golden()["deltas"][0]
    with session_scope(postgres_url) as session:
        tenant = Tenant(name=f"t-{new_id()}")
        session.add(tenant)
        session.flush()
        dataset = Dataset(
            tenant_id=tenant.id, name="d", task={}, label_counts={"a": 400}, record_count=820
        )
        session.add(dataset)
        session.flush()
        session.add(
            Budget(dataset_id=dataset.id, epsilon=100.0, delta=delta, accounting=accounting.value)
        )
        for index, job in enumerate(recorded["jobs"]):
            row = golden()["jobs"][job]["event"]
            session.add(
                LedgerEntry(
                    dataset_id=dataset.id,
                    job_id=f"job-{index}",
                    kind=LedgerKind.RESERVE.value,
                    epsilon=1.0,
                    delta=delta,
                    event=row,
                )
            )
        dataset_id = dataset.id
    with session_scope(postgres_url) as session:
        budget = ledger.lock_budget(session, dataset_id)
        spent = ledger.spend(session, budget)
        assert spent.jobs == len(recorded["jobs"])
        assert spent.epsilon == pytest.approx(recorded[accounting.value]["epsilon"][0], rel=REL)
        assert len(ledger.live_events(session, dataset_id)) == len(recorded["jobs"])
