"""The job and prompt pages over HTTP (issue 24, items 1, 3 and 4): what a job costs and why,
its parameters, timings, dataset and prompt; the jobs table's charged-epsilon column, filters
and sorting; the prompts list's dataset and method. Every response goes through the API
tests' recording client, which fails the test if any private record text appears, and each
test also opens every page it touched and looks for the marker itself."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest

from app.db.models import Dataset
from app.db.session import session_scope
from app.privacy.display import epsilon_text
from tests.api.conftest import FAST_PARAMS, MARKER, Api, auth, make_api
from tests.ui.test_pages import finished_job, funded, sign_in


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def _text(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</', page, re.S)
    assert match, element_id
    return html.unescape(match.group(1)).strip()


def _rows(page: str) -> list[str]:
    return re.findall(r'<tr data-job-id="(\w+)"', page)


def _three_jobs(api: Api) -> tuple[str, dict, dict, dict]:
    """A dataset named "questions" with a succeeded, a cancelled (released) and a queued job."""
    dataset_id = funded(api, 5.0)
    with session_scope(api.url) as session:
        session.get(Dataset, dataset_id).name = "questions"
    succeeded = finished_job(api, dataset_id)
    cancelled = api.submit(dataset_id, 0.5).json()
    api.client.post(f"/v1/jobs/{cancelled['id']}/cancel", headers=auth(api.admin))
    queued = api.submit(dataset_id, 0.25).json()
    return dataset_id, succeeded, cancelled, queued


def test_the_job_page_shows_parameters_charge_timings_and_its_prompt(api: Api) -> None:
    dataset_id, succeeded, cancelled, _ = _three_jobs(api)
    client = api.client
    sign_in(client, api.admin)

    page = client.get(f"/ui/jobs/{succeeded['id']}").text
    assert _text(page, "job-dataset") == "questions"
    assert f'href="/ui/datasets/{dataset_id}"' in page
    assert _text(page, "job-method") == "tang"
    # The job's epsilon is the planned one (what the ledger charges), not the one asked for
    assert _text(page, "job-planned") == epsilon_text(succeeded["epsilon"])
    assert _text(page, "job-asked") == "1"  # api.submit asks for epsilon 1
    assert "ε requested" not in page
    assert float(_text(page, "job-charged")) == pytest.approx(succeeded["epsilon"], rel=1e-3)
    assert _text(page, "job-charge") == "charged"
    assert _text(page, "job-charge-note") == succeeded["charge_note"]
    for name, value in FAST_PARAMS.items():
        assert f'data-param="{name}">{name} = {value}<' in page
    assert 'data-param="sigma0">sigma0 = auto<' in page  # decided by the planner
    assert _text(page, "job-started").endswith(" UTC")
    assert _text(page, "job-duration").endswith((" s", " min"))
    assert _text(page, "job-progress") == "complete"
    assert f'href="/ui/prompts/{succeeded["prompt_id"]}"' in page
    assert 'id="job-error"' not in page and "<dt>Error</dt>" not in page  # no empty row

    page = client.get(f"/ui/jobs/{cancelled['id']}").text
    assert float(_text(page, "job-charged")) == 0.0 and _text(page, "job-charge") == "released"
    assert "before it read any private record" in _text(page, "job-charge-note")
    assert _text(page, "job-started") == "—" and _text(page, "job-duration") == "—"
    assert 'id="job-prompt" hidden' in page

    status = client.get(f"/ui/jobs/{cancelled['id']}/status").json()
    assert status["charge"] == "released" and status["charged_epsilon"] == 0.0
    api_view = api.client.get(f"/v1/jobs/{cancelled['id']}", headers=auth(api.admin)).json()
    assert status["charge_note"] == api_view["charge_note"]
    assert status["progress_text"].startswith("0/")
    assert MARKER not in page


def test_the_jobs_table_has_charged_epsilon_filters_and_sorting(api: Api) -> None:
    dataset_id, succeeded, cancelled, queued = _three_jobs(api)
    other = funded(api, 2.0)
    other_job = api.submit(other, 0.5).json()
    client = api.client
    sign_in(client, api.admin)

    page = client.get("/ui/jobs").text
    assert "charged ε" in page
    assert set(_rows(page)) == {succeeded["id"], cancelled["id"], queued["id"], other_job["id"]}
    row = page[page.index(f'data-job-id="{cancelled["id"]}"') :]
    charged = re.search(r'data-field="charged">([^<]+)<', row)
    assert charged and float(charged.group(1)) == 0.0
    assert 'data-field="charge">released<' in row[: row.index("</tr>")]

    only_cancelled = client.get("/ui/jobs?status=cancelled").text
    assert _rows(only_cancelled) == [cancelled["id"]]
    assert '<option value="cancelled" selected>' in only_cancelled
    only_other = client.get(f"/ui/jobs?dataset={other}").text
    assert _rows(only_other) == [other_job["id"]]
    both = client.get(f"/ui/jobs?status=queued&dataset={dataset_id}").text
    assert _rows(both) == [queued["id"]]
    none = client.get("/ui/jobs?status=failed").text
    assert _rows(none) == [] and "No jobs match these filters." in none
    everything = client.get("/ui/jobs?status=&dataset=").text  # the form's "any"
    assert len(_rows(everything)) == 4

    by_charge = _rows(client.get("/ui/jobs?sort=charged&order=desc").text)
    charges = {succeeded["id"]: succeeded["epsilon"], cancelled["id"]: 0.0}
    charges |= {queued["id"]: queued["epsilon"], other_job["id"]: other_job["epsilon"]}
    assert [charges[j] for j in by_charge] == sorted(charges.values(), reverse=True)
    ascending = _rows(client.get("/ui/jobs?sort=charged&order=asc").text)
    assert ascending[0] == cancelled["id"]
    oldest_first = _rows(client.get("/ui/jobs?sort=created&order=asc").text)
    assert oldest_first[0] == succeeded["id"] and oldest_first[-1] == other_job["id"]
    sorted_page = client.get("/ui/jobs?sort=charged&order=desc").text
    assert 'href="?sort=charged&amp;order=asc"' in sorted_page  # flips on a click

    for query, name in (("sort=size", "sort"), ("order=up", "order"), ("status=lost", "status")):
        refused = client.get(f"/ui/jobs?{query}")
        assert refused.status_code == 422 and name in refused.text, query
    for body in (page, only_cancelled, only_other, both, everything, sorted_page):
        assert MARKER not in body


def test_the_prompt_pages_show_dataset_method_and_link_their_job(api: Api) -> None:
    dataset_id, succeeded, _, _ = _three_jobs(api)
    prompt_id = succeeded["prompt_id"]
    listed = api.client.get("/v1/prompts", headers=auth(api.reader)).json()
    assert [(p["id"], p["dataset_name"], p["method"]) for p in listed] == [
        (prompt_id, "questions", "tang")
    ]
    client = api.client
    sign_in(client, api.admin)
    prompts = client.get("/ui/prompts").text
    row = prompts[prompts.index(f'data-prompt-id="{prompt_id}"') :]
    row = row[: row.index("</tr>")]
    assert f'<a href="/ui/datasets/{dataset_id}">questions</a>' in row
    assert 'data-field="method">tang<' in row
    page = client.get(f"/ui/prompts/{prompt_id}").text
    assert _text(page, "prompt-method") == "tang"
    assert _text(page, "prompt-dataset").endswith(">questions")
    assert f'href="/ui/jobs/{succeeded["id"]}"' in page  # back to its job
    job_page = client.get(f"/ui/jobs/{succeeded['id']}").text
    assert f'href="/ui/prompts/{prompt_id}"' in job_page  # and the job links to it

    sign_in(client, api.reader)  # a prompts:read sign-in sees the job's ID, not a link
    page = client.get(f"/ui/prompts/{prompt_id}").text
    assert _text(page, "prompt-job") == succeeded["id"]
    assert f'href="/ui/jobs/{succeeded["id"]}"' not in page
    for body in (prompts, page, job_page):
        assert MARKER not in body
