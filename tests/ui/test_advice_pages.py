"""The dashboard's advice pages (issue 33): the form starts a run on a public labelled
dataset, the run's page shows the table beside zero-shot and the recommendation, a bad field
is a 422 naming it, and only admin sessions see any of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import Api, make_api
from tests.api.test_advice import finished, public_labelled
from tests.ui.test_pages import sign_in


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def test_the_form_starts_a_run_whose_page_shows_the_baselines(api: Api) -> None:
    dataset_id = public_labelled(api)
    csrf = sign_in(api.client, api.admin)
    listing = api.client.get("/ui/advice")
    assert listing.status_code == 200 and f'value="{dataset_id}"' in listing.text
    form = {"csrf": csrf, "dataset_id": dataset_id, "methods": "tang", "epsilons": "2",
            "shots": "2", "seeds": "2"}  # fmt: skip
    started = api.client.post("/ui/advice", data=form, follow_redirects=False)
    assert started.status_code == 303, started.text
    advice_id = started.headers["location"].rsplit("/", 1)[1]
    body = finished(api, advice_id)
    assert body["status"] == "succeeded", body
    page = api.client.get(f"/ui/advice/{advice_id}").text
    assert 'id="advice-summary"' in page and 'id="advice-zero-shot"' in page
    assert body["result"]["summary"] in page.replace("&#39;", "'")
    assert "<td>tang</td>" in page
    # the verdict the advice judged by (issue 55), not a comparison of the page's own
    (candidate,) = body["result"]["candidates"]
    assert f'<td data-outcome="{candidate["verdict"]}">' in page
    assert advice_id in api.client.get("/ui/advice").text


def test_a_bad_field_is_refused_by_name_and_nothing_starts(api: Api) -> None:
    dataset_id = public_labelled(api)
    csrf = sign_in(api.client, api.admin)
    bad = {"csrf": csrf, "dataset_id": dataset_id, "epsilons": "one"}
    response = api.client.post("/ui/advice", data=bad, follow_redirects=False)
    assert response.status_code == 422 and "epsilons" in response.text
    private = {"csrf": csrf, "dataset_id": api.upload()["id"], "epsilons": "1"}
    response = api.client.post("/ui/advice", data=private, follow_redirects=False)
    assert response.status_code == 409 and "public labelled dataset" in response.text
    assert "No advice runs yet" in api.client.get("/ui/advice").text


def test_a_prompts_read_session_sees_no_advice(api: Api) -> None:
    sign_in(api.client, api.reader)
    assert api.client.get("/ui/advice").status_code == 403
