"""A dataset by its name wherever its ID is taken (issue 43: "datasets only by 32-character
IDs (a unique name gets a bare 404)"): a dataset's name resolves to its ID in paths, job
requests and filters; names are unique among the tenant's live datasets (issue 55); another
tenant's names and deleted datasets' names resolve to nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import TOY_TASK, Api, auth, error_of, make_api, toy_rows


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def test_a_unique_name_works_where_the_id_does(api: Api) -> None:
    dataset = api.upload(name="support-tickets")
    by_name = api.client.get("/v1/datasets/support-tickets", headers=auth(api.admin))
    assert by_name.status_code == 200 and by_name.json()["id"] == dataset["id"]
    assert api.budget("support-tickets", 10.0).status_code == 200
    budget = api.client.get("/v1/datasets/support-tickets/budget", headers=auth(api.admin))
    assert budget.json()["dataset_id"] == dataset["id"]
    quote = api.client.post(
        "/v1/jobs/quote",
        json={"dataset_id": "support-tickets", "method": "tang", "epsilon": 1.0, "shots": 2},
        headers=auth(api.admin),
    )
    assert quote.status_code == 200 and quote.json()["dataset_id"] == dataset["id"]
    job = api.submit("support-tickets", 1.0)
    assert job.status_code == 201, job.text
    assert job.json()["dataset_id"] == dataset["id"]
    listed = api.client.get("/v1/jobs?dataset_id=support-tickets", headers=auth(api.admin))
    assert [j["id"] for j in listed.json()] == [job.json()["id"]]


def test_a_name_cannot_be_shared(api: Api) -> None:
    """Before issue 55 a second upload could take a name in use, after which every request
    by that name was a 409; now the upload is refused (tests/api/test_upload_mistakes.py)
    and the name keeps reaching its dataset."""
    first = api.upload(name="tickets")
    second = api.client.post(
        "/v1/datasets",
        json={"task": TOY_TASK, "records": toy_rows(), "name": "tickets"},
        headers=auth(api.admin),
    )
    assert second.status_code == 409 and error_of(second)["code"] == "name_taken"
    response = api.client.get("/v1/datasets/tickets", headers=auth(api.admin))
    assert response.status_code == 200 and response.json()["id"] == first["id"]


def test_another_tenants_name_and_a_deleted_datasets_name_resolve_to_nothing(api: Api) -> None:
    api.upload(name="theirs", key=api.other)
    assert api.client.get("/v1/datasets/theirs", headers=auth(api.admin)).status_code == 404
    gone = api.upload(name="gone")
    deleted = api.client.delete(f"/v1/datasets/{gone['id']}", headers=auth(api.admin))
    assert deleted.status_code == 200
    assert api.client.get("/v1/datasets/gone", headers=auth(api.admin)).status_code == 404
    assert api.client.get(f"/v1/datasets/{gone['id']}", headers=auth(api.admin)).status_code == 200
