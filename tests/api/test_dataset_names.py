"""A dataset by its name wherever its ID is taken (issue 43: "datasets only by 32-character
IDs (a unique name gets a bare 404)"): a name unique among the tenant's datasets resolves to
its ID in paths, job requests and filters; a shared name is a 409 listing the IDs; another
tenant's names and deleted datasets' names resolve to nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import Api, auth, error_of, make_api


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


def test_a_shared_name_is_refused_naming_the_datasets(api: Api) -> None:
    first, second = api.upload(name="tickets"), api.upload(name="tickets")
    response = api.client.get("/v1/datasets/tickets", headers=auth(api.admin))
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "ambiguous_name"
    assert first["id"] in error["message"] and second["id"] in error["message"]
    by_id = api.client.get(f"/v1/datasets/{first['id']}", headers=auth(api.admin))
    assert by_id.status_code == 200  # the ID always works


def test_another_tenants_name_and_a_deleted_datasets_name_resolve_to_nothing(api: Api) -> None:
    api.upload(name="theirs", key=api.other)
    assert api.client.get("/v1/datasets/theirs", headers=auth(api.admin)).status_code == 404
    gone = api.upload(name="gone")
    deleted = api.client.delete(f"/v1/datasets/{gone['id']}", headers=auth(api.admin))
    assert deleted.status_code == 200
    assert api.client.get("/v1/datasets/gone", headers=auth(api.admin)).status_code == 404
    assert api.client.get(f"/v1/datasets/{gone['id']}", headers=auth(api.admin)).status_code == 200
