"""One ``JobRequest`` from every entry point: the API, the dashboard's forms and Python callers
ask the services the same thing, and nothing a client set is dropped on the way (the
dashboard once ignored ``accounting``). On SQLite and PostgreSQL: accounting is the budget's,
a stored column both databases must give back."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.db.models import Dataset
from app.db.session import session_scope
from app.methods.kinds import MethodKind
from app.privacy.accounting import Accounting
from app.services.errors import InvalidError
from app.services.job_request import JobRequest
from app.services.jobs import quote_job
from app.synthesis.config import DEFAULT_SHOTS, default_shots
from tests.api.conftest import FAST_PARAMS, TOY_TASK, Api, auth, make_api, toy_rows
from tests.ui.test_pages import job_form, sign_in


@pytest.fixture(params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest):
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    yield from make_api(url)


def funded(api: Api, accounting: Accounting) -> str:
    # Paper accounting needs the dataset's counts declared public (issue 32).
    dataset = api.upload(counts_public=accounting is Accounting.PAPER)
    response = api.budget(dataset["id"], 3.0, accounting=accounting.value)
    assert response.status_code == 200, response.text
    return dataset["id"]


def test_the_dashboard_refuses_an_accounting_that_is_not_the_budgets(api: Api) -> None:
    """As the API does: a tight budget asked for a paper-accounted job is a 422 naming
    ``accounting``, from the quote and the submission alike, and nothing is reserved."""
    dataset_id = funded(api, Accounting.TIGHT)
    csrf = sign_in(api.client, api.admin)
    form = job_form(dataset_id, csrf, 1.0, accounting="paper")
    via_api = api.submit(dataset_id, accounting="paper")
    assert via_api.status_code == 422 and "accounting" in via_api.text

    quote = api.client.post("/ui/jobs/quote", data=form, headers={"Accept": "application/json"})
    assert quote.status_code == 422, quote.text
    assert quote.json()["error"]["message"].startswith("accounting: ")
    submitted = api.client.post("/ui/jobs", data=form, follow_redirects=False)
    assert submitted.status_code == 422, submitted.text
    assert "accounting" in submitted.text
    assert api.queue.enqueued == []
    budget = api.client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(api.admin))
    assert budget.json()["spent"] == 0


def test_the_dashboard_submits_the_accounting_it_was_given(api: Api) -> None:
    dataset_id = funded(api, Accounting.PAPER)
    csrf = sign_in(api.client, api.admin)
    form = job_form(dataset_id, csrf, 1.0, accounting="paper")
    quote = api.client.post("/ui/jobs/quote", data=form, headers={"Accept": "application/json"})
    assert quote.status_code == 200, quote.text
    submitted = api.client.post("/ui/jobs", data=form, follow_redirects=False)
    assert submitted.status_code == 303, submitted.text
    job_id = submitted.headers["location"].rsplit("/", 1)[1]
    job = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()
    assert job["accounting"] == "paper" and job["shots"] == 2
    assert job["epsilon"] == pytest.approx(quote.json()["epsilon"], rel=1e-6)


def test_an_unset_shots_is_the_default_everywhere(api: Api) -> None:
    dataset_id = funded(api, Accounting.TIGHT)
    via_api = api.client.post(
        "/v1/jobs",
        json={"dataset_id": dataset_id, "method": "tang", "epsilon": 1.0, "params": FAST_PARAMS},
        headers=auth(api.admin),
    )
    assert via_api.status_code == 201, via_api.text
    assert via_api.json()["shots"] == default_shots(2) == DEFAULT_SHOTS  # the toy's 2 labels
    csrf = sign_in(api.client, api.admin)
    form = {k: v for k, v in job_form(dataset_id, csrf, 0.5).items() if k != "shots"}
    submitted = api.client.post("/ui/jobs", data=form, follow_redirects=False)
    assert submitted.status_code == 303, submitted.text
    job_id = submitted.headers["location"].rsplit("/", 1)[1]
    job = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()
    assert job["shots"] == DEFAULT_SHOTS
    assert JobRequest(dataset_id="d", epsilon=1.0).shots is None  # the task decides
    assert default_shots(14) == DEFAULT_SHOTS


def test_an_unset_shots_shows_every_label_of_a_task_of_few_labels(api: Api) -> None:
    """Issue 34: 4 shots of TREC's 6 labels left two labels unseen; with no shots given, a
    task of at most 8 labels gets one per label, here 6 (and the quote plans the same: to the
    last digit, since issue 41, as both read the dataset's one count release)."""
    labels = tuple(f"w{i}" for i in range(1, 7))
    dataset = api.upload(toy_rows(8, labels), task={**TOY_TASK, "labels": list(labels)})
    assert api.budget(dataset["id"], 5.0).status_code == 200
    body = {"dataset_id": dataset["id"], "method": "tang", "epsilon": 1.0, "params": FAST_PARAMS}
    quote = api.client.post("/v1/jobs/quote", json=body, headers=auth(api.admin))
    assert quote.status_code == 200, quote.text
    job = api.client.post("/v1/jobs", json=body, headers=auth(api.admin))
    assert job.status_code == 201, job.text
    assert job.json()["shots"] == default_shots(6) == 6
    assert quote.json()["epsilon"] == job.json()["epsilon"]
    assert quote.json()["noise"] == job.json()["noise"] and len(job.json()["noise"]) == 6
    three = api.client.post("/v1/jobs", json={**body, "shots": 3}, headers=auth(api.admin))
    assert three.status_code == 201 and three.json()["shots"] == 3  # a given count stands


def test_the_services_take_one_request_with_their_own_422s(api: Api) -> None:
    """A Python caller builds the same object; the service's checks keep their messages."""
    dataset_id = funded(api, Accounting.TIGHT)
    with session_scope(api.url) as session:
        row = session.get(Dataset, dataset_id)
        assert row is not None
        asked = JobRequest(
            dataset_id=dataset_id,
            method=MethodKind.TANG,
            epsilon=1.0,
            shots=2,
            accounting=Accounting.PAPER,
            params=FAST_PARAMS,
        )
        with pytest.raises(InvalidError, match=r"^accounting: the dataset's budget uses tight"):
            quote_job(session, asked, tenant_id=row.tenant_id)
        tight = asked.model_copy(update={"accounting": Accounting.TIGHT})
        assert quote_job(session, tight, tenant_id=row.tenant_id).fits
        seeded = asked.model_copy(update={"accounting": None, "params": {"seed": 1}})
        with pytest.raises(InvalidError, match=r"params\.seed"):
            quote_job(session, seeded, tenant_id=row.tenant_id)
        bad_epsilon = tight.model_copy(update={"epsilon": float("nan")})
        with pytest.raises(InvalidError, match=r"^epsilon: must be a positive finite number"):
            quote_job(session, bad_epsilon, tenant_id=row.tenant_id)


def test_a_job_request_is_a_frozen_validated_value() -> None:
    asked = JobRequest(dataset_id="d", method="promptpate", epsilon=1.0, public_dataset_id="p")
    assert asked.method == MethodKind.PROMPTPATE and asked.accounting is None
    with pytest.raises(ValidationError):
        asked.epsilon = 2.0  # type: ignore[misc]
    for bad in ({"shots": 0}, {"shots": 65}, {"method": "nope"}, {"accounting": "loose"}):
        with pytest.raises(ValidationError):
            JobRequest(dataset_id="d", epsilon=1.0, **bad)
    with pytest.raises(ValidationError, match="extra"):
        JobRequest(dataset_id="d", epsilon=1.0, tenant_id="t")  # who asks is not the request
