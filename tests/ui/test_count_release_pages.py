"""Issue 41 on the dashboard: the dataset's count release is a line of its own on the budget
card, a table of its own and a ledger row that links to no job; the chart marks it; a job's
page shows each label's noise and the release it was planned from; the fleet page shows the
release's part of each spend. Every response goes through the recording client, which fails
the test if a private record's text appears."""

from __future__ import annotations

import re

import pytest

from app.privacy.display import epsilon_text
from tests.api.conftest import Api, RecordingClient, auth, make_api
from tests.ui.test_fleet_pages import _org_key, _sign_in
from tests.ui.test_pages import job_form, sign_in

JSON = {"Accept": "application/json"}


@pytest.fixture
def api(sqlite_url: str):
    yield from make_api(sqlite_url)


def _budget(api: Api, dataset_id: str) -> dict:
    return api.client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(api.admin)).json()


def test_the_budget_card_and_the_ledger_show_the_count_release(api: Api) -> None:
    client, csrf = api.client, sign_in(api.client, api.admin)
    dataset = api.upload()
    assert api.budget(dataset["id"], 4.0).status_code == 200
    page = client.get(f"/ui/datasets/{dataset['id']}").text
    assert 'id="budget-counts"' not in page and 'id="count-releases"' not in page

    quote = client.post("/ui/jobs/quote", data=job_form(dataset["id"], csrf), headers=JSON)
    assert quote.status_code == 200, quote.text
    assert set(quote.json()["noise"]) == {"w5", "w7"}
    submitted = client.post("/ui/jobs", data=job_form(dataset["id"], csrf), follow_redirects=False)
    assert submitted.status_code == 303, submitted.text
    [release] = _budget(api, dataset["id"])["count_releases"]
    assert quote.json()["counts_epsilon"] == release["epsilon"]

    page = client.get(f"/ui/datasets/{dataset['id']}").text
    shown = re.search(r'id="budget-counts">([^<]+)</span><span>([^<]+)<', page)
    assert shown and float(shown.group(1)) == pytest.approx(release["epsilon"], rel=1e-3)
    assert shown.group(2) == "count release (5% of the budget), once for this dataset"
    row = re.search(rf'<tr data-release="{release["id"]}" data-current="yes">(.*?)</tr>', page)
    assert row, "no row of the release in its table"
    sigma = re.search(r'class="num release-sigma">([^<]+)<', row.group(1))
    assert sigma and float(sigma.group(1)) == pytest.approx(release["sigma"], rel=1e-3)
    # Its ledger row names the release and links to no job; the job's row links to the job.
    assert f"/ui/jobs/{release['id']}" not in page
    assert f"release {release['id'][:12]}…" in page and 'class="ledger-counts"' in page
    assert "every label (record counts)" in page
    assert f'href="{submitted.headers["location"]}"' in page
    assert 'class="marker marker-counts"' in page and "count release" in page


def test_the_job_page_shows_each_labels_noise_and_its_release(api: Api) -> None:
    client, csrf = api.client, sign_in(api.client, api.admin)
    dataset = api.upload()
    assert api.budget(dataset["id"], 4.0).status_code == 200
    submitted = client.post("/ui/jobs", data=job_form(dataset["id"], csrf), follow_redirects=False)
    assert submitted.status_code == 303, submitted.text
    job_id = submitted.headers["location"].rsplit("/", 1)[1]
    job = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()
    page = client.get(submitted.headers["location"]).text
    noise = re.search(r'<dd id="job-noise">(.*?)</dd>', page, re.S)
    assert noise, "no noise on the job page"
    for label, sigma in job["noise"].items():
        assert f'data-label="{label}">{label}: {sigma:.4g}</span>' in noise.group(1)
    assert job["count_release_id"][:12] in page


def test_the_fleet_shows_the_count_releases_part_of_each_spend(api: Api) -> None:
    spending = api.upload(name="with-a-release")["id"]
    assert api.budget(spending, 4.0).status_code == 200
    assert api.submit(spending, 1.0).status_code == 201
    idle = api.upload(name="without")["id"]
    assert api.budget(idle, 4.0).status_code == 200
    counts = _budget(api, spending)["counts_epsilon"]
    client = RecordingClient(api.client.app)
    _sign_in(client, _org_key(api))
    page = client.get("/ui/fleet").text
    row = re.search(rf'data-dataset-id="{spending}"(.*?)</tr>', page, re.S)
    assert row and f"incl. count release {epsilon_text(counts)}" in row.group(1)
    other = re.search(rf'data-dataset-id="{idle}"(.*?)</tr>', page, re.S)
    assert other and "count release" not in other.group(1)
    client.assert_no_private_text()
