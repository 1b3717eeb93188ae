"""The dashboard's smaller items of issue 34's user study, over HTTP: ``/`` leads to the
dashboard, a signed-out deep link comes back after sign-in (and ``next`` never leaves the
dashboard: no open redirect), the upload form preselects no task, δ is printed to 3
significant digits (and the budget form keeps an unchanged δ exact), a job's planned ε is not
called "requested", and a public dataset's page says what it is for."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from app.api.routes.ui.session import safe_next
from app.privacy.display import epsilon_text
from app.ui.render import three_digits
from tests.api.conftest import MARKER, Api, auth, csv_bytes, make_api, toy_rows
from tests.api.test_validation import upload_validation
from tests.ui.test_pages import csrf_of, funded, sign_in

# Honoured as ``next``: pages of the dashboard, with their query.
GOOD_NEXT = ["/ui", "/ui/jobs", "/ui/datasets?kind=private&sort=used", "/ui/jobs/0123abcd"]
# Never honoured: other sites, other paths of this one, and the sign-in pages themselves.
BAD_NEXT = [
    "https://evil.example/ui",
    "http://evil.example",
    "//evil.example",
    "//evil.example/ui/jobs",
    "/\\evil.example",
    "/ui\\..\\evil",
    "/ui//evil.example",
    "/ui.evil.example",
    "/uix",
    "ui/jobs",
    "javascript:alert(1)",
    "/ui/../v1/keys",
    "/ui/%2e%2e/v1/keys",
    "/ui/jobs\r\nSet-Cookie: x=1",
    "/ui/jobs x",
    "/ui/login",
    "/ui/login?next=/ui/jobs",
    "/ui/logout",
    "/ui/" + "a" * 3000,
    "",
]


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def _by_id(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</', page, re.S)
    assert match, element_id
    return html.unescape(match.group(1)).strip()


def _sign_in_form(api: Api, login_url: str, key: str) -> tuple[str, dict[str, str]]:
    """The sign-in page at ``login_url`` and the form it posts (with its hidden fields)."""
    page = api.client.get(login_url).text
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', page))
    return page, {**{k: html.unescape(v) for k, v in fields.items()}, "api_key": key}


# --- 1. the service's address is the dashboard ------------------------------------------------


def test_the_root_redirects_to_the_dashboard_and_the_api_is_untouched(api: Api) -> None:
    client = api.client
    root = client.get("/", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/ui"
    assert client.get("/").url.path == "/ui/login"  # signed out: on to the sign-in page
    assert "/" not in client.get("/openapi.json").json()["paths"]
    assert client.get("/healthz").status_code == 200
    assert client.get("/docs").status_code == 200
    assert client.get("/v1/datasets").status_code == 401
    assert client.get("/v1/datasets", headers=auth(api.admin)).status_code == 200


# --- 2. sign-in keeps the deep link -----------------------------------------------------------


def test_a_signed_out_deep_link_comes_back_after_signing_in(api: Api) -> None:
    dataset_id = funded(api)
    job = api.submit(dataset_id).json()
    client = api.client
    sent = client.get(f"/ui/jobs/{job['id']}", follow_redirects=False)
    login_url = f"/ui/login?next={quote('/ui/jobs/' + job['id'], safe='')}"
    assert sent.status_code == 303 and sent.headers["location"] == login_url

    _, form = _sign_in_form(api, login_url, "not a key")
    assert form["next"] == f"/ui/jobs/{job['id']}"
    wrong = client.post("/ui/login", data=form, follow_redirects=False)
    assert wrong.status_code == 401 and csrf_of(wrong.text)  # a failed sign-in keeps it too
    kept = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', wrong.text))
    assert kept["next"] == f"/ui/jobs/{job['id']}"

    _, form = _sign_in_form(api, login_url, api.admin)
    signed_in = client.post("/ui/login", data=form, follow_redirects=False)
    assert signed_in.status_code == 303
    assert signed_in.headers["location"] == f"/ui/jobs/{job['id']}"
    assert client.get(signed_in.headers["location"]).status_code == 200


def test_a_deep_link_keeps_its_query_and_the_home_page_needs_no_next(api: Api) -> None:
    client = api.client
    sent = client.get("/ui/jobs?status=queued", follow_redirects=False)
    assert sent.headers["location"] == "/ui/login?next=%2Fui%2Fjobs%3Fstatus%3Dqueued"
    assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/login"
    _, form = _sign_in_form(api, sent.headers["location"], api.admin)
    signed_in = client.post("/ui/login", data=form, follow_redirects=False)
    assert signed_in.headers["location"] == "/ui/jobs?status=queued"
    # a script's fetch gets a 401, not a page to sign in on
    client.cookies.clear()
    fetched = client.get("/ui/jobs/x/status", headers={"Accept": "application/json"})
    assert fetched.status_code == 401


@pytest.mark.parametrize("target", GOOD_NEXT)
def test_next_is_honoured_for_a_dashboard_page(target: str) -> None:
    assert safe_next(target) == target


@pytest.mark.parametrize("target", BAD_NEXT)
def test_next_is_refused_for_anything_else(target: str) -> None:
    assert safe_next(target) is None


@pytest.mark.parametrize(
    "target", ["https://evil.example/ui", "//evil.example", "/\\evil.example", "/ui/login"]
)
def test_signing_in_with_a_foreign_next_lands_on_the_dashboard(api: Api, target: str) -> None:
    """An open-redirect attempt: a link to the sign-in page naming another site."""
    client = api.client
    login_url = f"/ui/login?next={quote(target, safe='')}"
    page, form = _sign_in_form(api, login_url, api.admin)
    assert 'name="next"' not in page and "evil" not in page
    form["next"] = target  # posted by hand: the server checks it again
    signed_in = client.post("/ui/login", data=form, follow_redirects=False)
    assert signed_in.status_code == 303 and signed_in.headers["location"] == "/ui"


# --- 3. the upload form preselects no task ----------------------------------------------------


def test_the_upload_form_starts_without_a_task_and_asks_for_one(api: Api) -> None:
    client = api.client
    csrf = sign_in(client, api.admin)
    page = client.get("/ui/datasets").text
    select = re.search(r'<select name="task" id="upload-task">(.*?)</select>', page, re.S)
    assert select
    options = re.findall(r"<option ([^>]*)>", select.group(1))
    assert options[0] == 'value="" selected'
    assert all("selected" not in option for option in options[1:])

    rows = {"file": ("rows.csv", csv_bytes(toy_rows()), "text/csv")}
    missing = client.post(
        "/ui/datasets/upload", data={"csrf": csrf, "task": "", "name": "no task"}, files=rows
    )
    assert missing.status_code == 422
    assert "task: required for a private dataset" in html.unescape(missing.text)
    texts = {"file": ("texts.csv", b"text\nsome public text\nmore text\n", "text/csv")}
    public = client.post(
        "/ui/datasets/upload",
        data={"csrf": csrf, "task": "", "public": "on"},
        files=texts,
        follow_redirects=False,
    )
    assert public.status_code == 303, public.text  # public texts need no task
    assert MARKER not in missing.text


# --- 6. numbers to the digits that matter -----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.00014450867052023122, "1.44e-4"),  # truncated, as every figure (app.privacy.display)
        (1e-6, "1e-6"),
        (2.5e-7, "2.5e-7"),
        (0.0001, "1e-4"),
        (0.001, "0.001"),
        (0.0123456, "0.0123"),
        (0.5, "0.5"),
    ],
)
def test_three_digits(value: float, text: str) -> None:
    assert three_digits(value) == text


def test_delta_is_shown_to_three_digits_and_an_unchanged_form_keeps_it(api: Api) -> None:
    delta = 0.00014450867052023122
    dataset_id = funded(api)
    assert api.budget(dataset_id, 3.0, delta=delta).status_code == 200
    client = api.client
    csrf = sign_in(client, api.admin)
    page = client.get(f"/ui/datasets/{dataset_id}").text
    assert "0.00014450867052023122" not in page and "0.000144" not in page
    assert "δ = 1.44e-4" in html.unescape(page)
    shown = re.search(r'<input type="number" name="delta"[^>]*value="([^"]*)"', page)
    assert shown and shown.group(1) == "1.44e-4"

    def save(delta_text: str) -> float:
        form = {"csrf": csrf, "epsilon": "3", "accounting": "tight", "delta": delta_text}
        form["delta_shown"] = re.findall(r'name="delta_shown" value="([^"]*)"', page)[0]
        saved = client.post(f"/ui/datasets/{dataset_id}/budget", data=form)
        assert saved.status_code == 200, saved.text
        budget = client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(api.admin))
        return float(budget.json()["delta"])

    assert save("1.44e-4") == delta  # resubmitted as shown: the exact δ stays
    assert save("2e-4") == 2e-4  # changed: stored as typed

    job = api.submit(dataset_id).json()
    job_page = client.get(f"/ui/jobs/{job['id']}").text
    assert _by_id(job_page, "job-delta") == "2e-4"


# --- 6. a job's planned ε is not "requested" --------------------------------------------------


def test_a_promptpate_job_shows_the_epsilon_asked_and_the_one_planned(api: Api) -> None:
    dataset_id = funded(api, 10.0)
    public = api.upload_public()
    submitted = api.submit_pate(dataset_id, public["id"], epsilon=2.0)
    assert submitted.status_code == 201, submitted.text
    job = submitted.json()  # its epsilon: the accountant's of the planned noise, not 2
    sign_in(api.client, api.admin)
    page = api.client.get(f"/ui/jobs/{job['id']}").text
    assert _by_id(page, "job-asked") == "2"
    assert _by_id(page, "job-planned") == epsilon_text(job["epsilon"])
    assert "ε requested" not in page
    jobs = api.client.get("/ui/jobs").text
    assert "ε planned" in jobs and "ε requested" not in jobs


# --- 7. what a public dataset is for ----------------------------------------------------------


def test_a_public_datasets_page_says_what_it_is_for(api: Api) -> None:
    client = api.client
    sign_in(client, api.admin)
    texts = api.upload_public()
    validation = upload_validation(api)

    unlabelled = _by_id(client.get(f"/ui/datasets/{texts['id']}").text, "public-use")
    assert "PromptPATE job of a private dataset takes them as its public inputs" in unlabelled
    assert "cannot be a validation set" in unlabelled

    labelled = _by_id(client.get(f"/ui/datasets/{validation['id']}").text, "public-use")
    assert labelled.startswith("A validation set: public labelled records")
    assert "its texts, not its labels" in labelled
    assert "never charged" in labelled
