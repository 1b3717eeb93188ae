"""The dashboard's job form: it offers the accounting and sends the choice on, and it is
generated from the method registry (a method registered from here appears with its parameter,
and its parameter is parsed from the form, with no edit to the dashboard)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.datastructures import FormData

from app.api.routes.ui import forms
from app.methods import registry
from app.methods.params import Param, params_model
from app.privacy.accounting import Accounting
from tests.api.conftest import Api, auth, make_api
from tests.ui.test_pages import job_form, sign_in


@pytest.fixture
def api(sqlite_url: str):
    yield from make_api(sqlite_url)


def funded(api: Api, accounting: Accounting) -> str:
    # Paper accounting needs the dataset's counts declared public (issue 32).
    dataset = api.upload(counts_public=accounting is Accounting.PAPER)
    response = api.budget(dataset["id"], 3.0, accounting=accounting.value)
    assert response.status_code == 200, response.text
    return dataset["id"]


def select_options(html: str, select_id: str) -> list[tuple[str, bool]]:
    """The options of the page's ``<select id=select_id>``: (value, preselected)."""
    match = re.search(rf'<select[^>]*id="{select_id}"[^>]*>(.*?)</select>', html, re.S)
    assert match, f"no select #{select_id} on the page"
    return [
        (value, " selected" in attributes)
        for value, attributes in re.findall(r'<option value="([^"]*)"([^>]*)>', match.group(1))
    ]


def job_of(api: Api, response: Any) -> dict[str, Any]:
    assert response.status_code == 303, response.text
    job_id = response.headers["location"].rsplit("/", 1)[1]
    return dict(api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json())


def test_the_job_form_offers_the_accounting_and_sends_the_choice(api: Api) -> None:
    """Every accounting is offered, the budget's (the API's default) preselected; a chosen
    one reaches the job, and one that is not the budget's is refused as the API refuses it."""
    dataset_id = funded(api, Accounting.PAPER)
    csrf = sign_in(api.client, api.admin)
    page = api.client.get(f"/ui/datasets/{dataset_id}").text
    options = select_options(page, "job-accounting")
    assert options == [("", True)] + [(a.value, False) for a in Accounting]
    assert "the budget's (paper)" in page

    chosen = job_form(dataset_id, csrf, 1.0, accounting="paper")
    job = job_of(api, api.client.post("/ui/jobs", data=chosen, follow_redirects=False))
    assert job["accounting"] == "paper"
    job_page = api.client.get(f"/ui/jobs/{job['id']}").text
    assert "paper accounting" in job_page

    default = job_form(dataset_id, csrf, 0.5, accounting="")  # the preselected option
    assert (
        job_of(api, api.client.post("/ui/jobs", data=default, follow_redirects=False))["accounting"]
        == "paper"
    )

    other = job_form(dataset_id, csrf, 0.5, accounting="tight")  # offered, not the budget's
    refused = api.client.post("/ui/jobs/quote", data=other, headers={"Accept": "application/json"})
    assert refused.status_code == 422
    assert refused.json()["error"]["message"].startswith("accounting: ")
    assert len(api.queue.enqueued) == 2


class _FormOnlyMethod:
    """Just what the registry and the form read of a method: a name, its one parameter and
    whether it reads a public dataset (it is never planned or run here)."""

    name = "formecho"
    title = ""
    reads_public = True
    parameters = (
        Param(
            name="echo_loudness",
            annotation=int,
            default=3,
            help="How loudly the test method echoes.",
            flag="--echo-loudness",
        ),
    )
    shots_param = None
    params = params_model("FormEchoParams", parameters)


def test_the_job_form_is_generated_from_the_registry(api: Api) -> None:
    dataset_id = funded(api, Accounting.TIGHT)
    sign_in(api.client, api.admin)
    before = api.client.get(f"/ui/datasets/{dataset_id}").text
    assert 'value="formecho"' not in before and "param_echo_loudness" not in before

    with registry.registered(_FormOnlyMethod()):  # type: ignore[arg-type]
        page = api.client.get(f"/ui/datasets/{dataset_id}").text
        methods = [value for value, _ in select_options(page, "job-method")]
        assert methods == list(registry.METHODS) and methods[-1] == "formecho"
        assert '<option value="formecho" data-reads-public="yes"' in page
        label = re.search(r'<label class="param" data-methods="formecho"[^>]*>', page)
        assert label and "How loudly the test method echoes. Default 3." in label.group(0)
        assert 'name="param_echo_loudness"' in page
        # A submission sends the parameter for its method only, typed as declared.
        form = FormData([("param_echo_loudness", " 7 "), ("param_M", "2")])
        assert forms.job_params(form, "formecho") == {"echo_loudness": 7}
        assert forms.job_params(form, "tang") == {"M": 2}

    after = api.client.get(f"/ui/datasets/{dataset_id}").text
    assert 'value="formecho"' not in after and "param_echo_loudness" not in after
