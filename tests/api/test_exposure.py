"""What the service shows without a key, and what its OpenAPI document promises (issue 10,
item 6)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import TOY_TASK, Api, auth, make_api

METRICS_TOKEN = "metrics-token-for-the-tests-0123456789abcdef"


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_without_a_token_carry_no_tenant_or_dataset(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 2.0).status_code == 200
    assert api.submit(dataset["id"], 1.0).status_code == 201
    response = api.client.get("/metrics")
    assert response.status_code == 200
    assert dataset["id"] not in response.text
    for family in _families(response.text).values():
        for sample in family.samples:
            assert not {"tenant_id", "dataset_id"} & set(sample.labels), sample
    jobs = {s.labels["status"]: s.value for s in _families(response.text)["dpsyn_jobs"].samples}
    assert jobs["queued"] == 1


def test_per_dataset_metrics_need_the_metrics_token(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, metrics_token=METRICS_TOKEN):
        dataset = api.upload()
        assert api.budget(dataset["id"], 2.0).status_code == 200
        assert api.client.get("/metrics").status_code == 401
        assert api.client.get("/metrics", headers=auth(api.admin)).status_code == 401
        response = api.client.get("/metrics", headers=auth(METRICS_TOKEN))
        assert response.status_code == 200
        budgets = _families(response.text)["dpsyn_budget_epsilon"].samples
        assert {s.labels["dataset_id"]: s.value for s in budgets}[dataset["id"]] == 2.0


def _operation(schema: dict, method: str, path: str) -> dict:
    return schema["paths"][path][method.lower()]


def _declared(schema: dict, method: str, path: str) -> set[int]:
    return {int(code) for code in _operation(schema, method, path)["responses"]}


def test_every_status_a_route_returns_is_declared(api: Api) -> None:
    """Provoke each route's errors and check that the OpenAPI document lists each status."""
    client, admin, reader = api.client, auth(api.admin), auth(api.reader)
    dataset = api.upload()
    seen: list[tuple[str, str, int]] = []

    def call(method: str, template: str, path: str | None = None, **kwargs) -> int:
        status = client.request(method, path or template, **kwargs).status_code
        seen.append((method, template, status))
        return status

    ds, budget = "/v1/datasets/{dataset_id}", "/v1/datasets/{dataset_id}/budget"
    job, prompt = "/v1/jobs/{job_id}", "/v1/prompts/{prompt_id}"
    for method, template, path in (
        ("GET", ds, f"/v1/datasets/{dataset['id']}"),
        ("DELETE", ds, "/v1/datasets/nope"),
        ("GET", budget, f"/v1/datasets/{dataset['id']}/budget"),
        ("GET", job, "/v1/jobs/nope"),
        ("POST", job + "/cancel", "/v1/jobs/nope/cancel"),
        ("GET", prompt, "/v1/prompts/nope"),
        ("DELETE", "/v1/keys/{key_id}", "/v1/keys/nope"),
        ("GET", "/v1/jobs", None),
    ):
        call(method, template, path)  # 401 without a key
        call(method, template, path, headers=admin)  # 404 (or 409: no budget yet)
        call(method, template, path, headers=reader)  # 403 on admin routes
    call("GET", "/v1/jobs", params={"limit": 0}, headers=admin)  # 422
    call("POST", "/v1/jobs", json={"dataset_id": dataset["id"], "epsilon": 1}, headers=admin)
    call("PUT", budget, f"/v1/datasets/{dataset['id']}/budget", json={"epsilon": -1}, headers=admin)
    call("POST", "/v1/datasets", content=b"x", headers={**admin, "Content-Type": "text/plain"})
    as_json = {**admin, "Content-Type": "application/json"}
    call("POST", "/v1/datasets", content=b"{", headers=as_json)
    call("POST", "/v1/datasets", json={"task": TOY_TASK, "records": [{}]}, headers=admin)
    call("POST", "/v1/keys", content=b"{", headers=as_json)  # 422
    call("POST", "/v1/keys", content=b"[" * 5000 + b"]" * 5000, headers=as_json)  # 400
    complete = "/v1/prompts/{prompt_id}/complete"
    call("POST", complete, "/v1/prompts/nope/complete", json={"query": "q"}, headers=reader)

    schema = client.get("/openapi.json").json()
    undeclared = [s for s in seen if s[2] not in _declared(schema, s[0], s[1])]
    assert not undeclared, undeclared
    statuses = {s[2] for s in seen}
    assert {400, 401, 403, 404, 409, 415, 422} <= statuses


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("POST", "/v1/datasets", {400, 401, 403, 413, 415, 422, 429, 503}),
        ("POST", "/v1/jobs", {401, 403, 404, 409, 413, 422, 429, 503}),
        ("POST", "/v1/prompts/{prompt_id}/complete", {401, 404, 413, 422, 429, 503}),
        ("GET", "/v1/prompts", {401, 422, 429, 503}),
        ("GET", "/healthz", {503}),
        ("GET", "/metrics", {401}),
    ],
)
def test_limits_and_outages_are_declared(
    api: Api, method: str, path: str, statuses: set[int]
) -> None:
    schema = api.client.get("/openapi.json").json()
    assert statuses <= _declared(schema, method, path)
    error = _operation(schema, method, path)["responses"][str(min(statuses))]
    assert error["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"
    }


def test_405_lists_every_method_of_the_path(api: Api) -> None:
    for path, allowed in (
        ("/v1/datasets", "GET, POST"),
        ("/v1/datasets/abc", "DELETE, GET"),
        ("/v1/datasets/abc/budget", "GET, PUT"),
        ("/v1/keys", "GET, POST"),
    ):
        response = api.client.request("PATCH", path, headers=auth(api.admin))
        assert response.status_code == 405
        assert response.headers["allow"] == allowed


def test_links_lead_from_created_ids_to_their_operations(api: Api) -> None:
    schema = api.client.get("/openapi.json").json()
    created = schema["paths"]["/v1/datasets"]["post"]["responses"]["201"]["links"]
    targets = {link["operationId"]: link for link in created.values()}
    get_dataset = schema["paths"]["/v1/datasets/{dataset_id}"]["get"]["operationId"]
    assert targets[get_dataset]["parameters"] == {"dataset_id": "$response.body#/id"}
    submit = schema["paths"]["/v1/jobs"]["post"]["operationId"]
    assert targets[submit]["requestBody"]["dataset_id"] == "$response.body#/id"
