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
        # The tight composition, as recorded (the filter's price builds on it: test_filter.py).
        assert spent.composed == pytest.approx(recorded[accounting.value]["epsilon"][0], rel=REL)
        assert spent.epsilon >= spent.composed
        assert len(ledger.live_events(session, dataset_id)) == len(recorded["jobs"])


def test_a_new_kind_of_mechanism_is_admitted_stored_as_primitives_and_composed(postgres_url):
    """A mechanism kind unknown to app/privacy (a Gaussian histogram of the labels) is
    admitted, stored in the primitives' form and composed with a token-loop job."""
    from app.privacy.accounting import accountant_for
    from app.privacy.events import GaussianEvent, Sensitivity, from_dict, to_dict
    from app.privacy.params import TangParams
    from app.privacy.synthesis import SynthesisPrivacy

    histogram = GaussianEvent(4.0, 1, Sensitivity(add_or_remove=1.0, replace_one=2**0.5))
    plan = SynthesisPrivacy(params=TangParams(sigma=2.0), M=10, N=2, tmax=5)
    synthesis = plan.synthesis_event({"a": 400}, {"a": 1})
    accountant = accountant_for(Accounting.TIGHT)
    delta = 1e-5
    with session_scope(postgres_url) as session:
        tenant = Tenant(name=f"t-{new_id()}")
        session.add(tenant)
        session.flush()
        dataset = Dataset(
            tenant_id=tenant.id, name="d", task={}, label_counts={"a": 400}, record_count=400
        )
        session.add(dataset)
        session.flush()
        session.add(Budget(dataset_id=dataset.id, epsilon=50.0, delta=delta, accounting="tight"))
        dataset_id = dataset.id
    for job_id, event in (("synthesis", synthesis), ("histogram", histogram)):
        with session_scope(postgres_url) as session:
            ledger.admit(
                session,
                dataset_id=dataset_id,
                job_id=job_id,
                event=event,
                epsilon=accountant.dataset_epsilon(event, delta),
                delta=delta,
                accounting=Accounting.TIGHT,
            )
    with session_scope(postgres_url) as session:
        # By job id, not by position: a query without ORDER BY returns rows in no set order.
        rows = {
            row.job_id: row
            for row in session.query(LedgerEntry).filter_by(dataset_id=dataset_id).all()
        }
        assert set(rows) == {"synthesis", "histogram"}
        stored = rows["histogram"].event
        assert stored == to_dict(histogram) and stored["type"] == "gaussian"
        assert from_dict(stored) == histogram
        spent = ledger.spend(session, ledger.lock_budget(session, dataset_id))
        assert spent.composed == accountant.dataset_epsilon([synthesis, histogram], delta)
        assert spent.composed > accountant.dataset_epsilon(synthesis, delta)
        assert spent.epsilon > spent.composed  # two jobs, one after the other: the filter
