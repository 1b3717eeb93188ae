"""Issue 32 on the dashboard: a dataset's page says whether its label counts are declared
public, when and by which key, and changes it; the upload form declares it; the budget card
explains its delta and warns; a job's page says which counts it used."""

from __future__ import annotations

import re

import pytest

from app.db.models import Budget
from app.db.session import session_scope
from tests.api.conftest import TOY_TASK, Api, auth, csv_bytes, make_api, toy_rows
from tests.ui.test_pages import job_form, key_id_of, sign_in


@pytest.fixture
def api(sqlite_url: str):
    yield from make_api(sqlite_url)


def _counts_cell(html: str) -> str:
    match = re.search(r'<dd id="counts-public"[^>]*>(.*?)</dd>', html, re.S)
    assert match, "no counts entry on the page"
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


def test_the_dataset_page_shows_and_changes_the_declaration(api: Api) -> None:
    client, csrf = api.client, sign_in(api.client, api.admin)
    admin_id = key_id_of(api, api.admin)
    dataset = api.upload()
    page = client.get(f"/ui/datasets/{dataset['id']}").text
    assert 'data-counts-public="no"' in page
    assert _counts_cell(page).startswith("private Only you (admin keys) see these counts")
    assert "Declare the counts public" in page

    path = f"/ui/datasets/{dataset['id']}/counts-public"
    declared = client.post(path, data={"csrf": csrf, "public": "true"}, follow_redirects=False)
    assert declared.status_code == 303
    page = client.get(f"/ui/datasets/{dataset['id']}").text
    cell = _counts_cell(page)
    assert 'data-counts-public="yes"' in page and cell.startswith("declared public declared 20")
    assert f"UTC by key {admin_id}" in cell and "Withdraw: counts private again" in page
    assert client.post(path, data={"csrf": "forged", "public": "false"}).status_code == 403
    bad = client.post(path, data={"csrf": csrf, "public": "maybe"}, follow_redirects=False)
    assert bad.status_code == 422

    withdrawn = client.post(path, data={"csrf": csrf, "public": "false"}, follow_redirects=False)
    assert withdrawn.status_code == 303
    cell = _counts_cell(client.get(f"/ui/datasets/{dataset['id']}").text)
    assert cell.startswith("private declaration withdrawn 20") and f"key {admin_id}" in cell


def test_the_upload_form_declares_it(api: Api) -> None:
    client, csrf = api.client, sign_in(api.client, api.admin)
    assert 'name="counts_public"' in client.get("/ui/datasets").text
    uploaded = client.post(
        "/ui/datasets/upload",
        data={
            "csrf": csrf,
            "task": "custom",
            "task_spec": __import__("json").dumps(TOY_TASK),
            "counts_public": "on",
        },
        files={"file": ("rows.csv", csv_bytes(toy_rows()), "text/csv")},
        follow_redirects=False,
    )
    assert uploaded.status_code == 303, uploaded.text
    dataset_id = uploaded.headers["location"].rsplit("/", 1)[1]
    got = api.client.get(f"/v1/datasets/{dataset_id}", headers=auth(api.admin)).json()
    assert got["counts_public"] is True and got["counts_public_by"] == key_id_of(api, api.admin)


def test_the_budget_card_explains_the_delta_and_the_job_page_the_counts(api: Api) -> None:
    client, csrf = api.client, sign_in(api.client, api.admin)
    dataset = api.upload()  # 24 records
    page_of = lambda: client.get(f"/ui/datasets/{dataset['id']}").text  # noqa: E731
    saved = client.post(
        f"/ui/datasets/{dataset['id']}/budget",
        data={"csrf": csrf, "epsilon": "3", "accounting": "tight"},
        follow_redirects=False,
    )
    assert saved.status_code == 303
    page = page_of()
    assert 'data-delta-source="default"' in page
    assert "δ = 1e-6: the public default, chosen independent of the dataset" in page
    assert 'id="budget-delta-note"' not in page and 'placeholder="default: unchanged' in page

    api.budget(dataset["id"], 3.0, delta=0.1)  # above 1/24
    page = page_of()
    assert 'data-delta-source="owner"' in page and "set by the owner" in page
    assert 'id="budget-delta-note"' in page and "above 1/|D|" in page
    with session_scope(api.url) as session:  # a budget from before issue 32: 1/|D|
        row = session.get(Budget, dataset["id"])
        assert row is not None
        row.delta = 1 / 24
    page = page_of()
    assert 'data-delta-source="former_default"' in page and "learn the dataset" in page

    api.budget(dataset["id"], 3.0, delta=1e-6)
    job = client.post("/ui/jobs", data=job_form(dataset["id"], csrf), follow_redirects=False)
    assert job.status_code == 303, job.text
    job_page = client.get(job.headers["location"]).text
    assert 'data-counts="released"' in job_page
    assert "planned with the dataset's count release" in job_page
    assert "released once under DP, charged once to the dataset's budget" in job_page


def test_a_paper_budget_on_undeclared_counts_says_so(api: Api) -> None:
    sign_in(api.client, api.admin)
    dataset = api.upload()
    api.budget(dataset["id"], 3.0, accounting="paper")
    page = api.client.get(f"/ui/datasets/{dataset['id']}").text
    assert 'id="budget-accounting-note"' in page and "declared public" in page
