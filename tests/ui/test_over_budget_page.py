"""A ledger admitted before the filter that now prices over its budget (issue 51, item 5):
the dataset page and the budget API say why, and no new job is admitted."""

from __future__ import annotations

import pytest

from app.db.models import LedgerEntry, LedgerKind
from app.db.session import session_scope
from app.privacy.accounting import TightPldAccountant
from app.privacy.events import to_dict
from tests.api.conftest import Api, auth, error_of, make_api
from tests.ledger.test_filter_migration import DELTA, JOBS
from tests.ui.test_pages import sign_in


@pytest.fixture
def api(postgres_url: str):
    yield from make_api(postgres_url)


def test_an_old_ledger_over_its_budget_is_flagged_on_the_page_and_admits_nothing(api: Api):
    dataset = api.upload(counts_public=True)
    composed = TightPldAccountant(cached=False).dataset_epsilon(JOBS, DELTA)
    assert api.budget(dataset["id"], composed * 1.01, delta=DELTA).status_code == 200
    with session_scope(api.url) as session:  # what the old rule admitted, one job at a time
        for index, event in enumerate(JOBS):
            session.add(
                LedgerEntry(
                    dataset_id=dataset["id"],
                    job_id=f"old{index}",
                    kind=LedgerKind.RESERVE.value,
                    epsilon=1.0,
                    delta=DELTA,
                    event=to_dict(event),
                )
            )
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    body = budget.json()
    assert body["level"] == "over" and body["spent"] > body["epsilon"] >= body["composed"]
    assert body["over_note"] and "Nothing served is withdrawn" in body["over_note"]

    sign_in(api.client, api.admin)
    page = api.client.get(f"/ui/datasets/{dataset['id']}")
    assert page.status_code == 200
    assert 'id="budget-over-note"' in page.text and "over budget" in page.text
    assert 'data-rule="renyi_filter"' in page.text

    refused = api.submit(dataset["id"], 0.1)
    assert refused.status_code == 409, refused.text
    assert error_of(refused)["code"] == "budget_exceeded"
