"""The dashboard in a real browser (headless Chromium): sign in, upload, set a budget, check a
job's cost, submit it, watch it finish live, open its prompt, query it, sign out; and the
cross-tenant and CSRF protections as a browser meets them.

With ``DPSYN_SCREENSHOTS=<folder>`` the walk-through also saves a screenshot of each page
there (``scripts/dashboard_screenshots.sh`` makes the ones in docs/dashboard/).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import FAST_PARAMS, MARKER, TOY_TASK, csv_bytes, toy_rows
from tests.ui.conftest import LiveServer

SHOTS = os.environ.get("DPSYN_SCREENSHOTS")
WAIT_S = 20


def by_id(driver: Any, element_id: str) -> Any:
    """The element, waiting up to 10 s for it: a click that submits a form returns before
    the next page has loaded when the machine is busy (two test workers)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    locate = expected_conditions.presence_of_element_located((By.ID, element_id))
    return WebDriverWait(driver, 10).until(locate)


def css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def wait_for(driver: Any, test: Callable[[Any], Any], what: str) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # An element found just before a submitted form's page replaces it goes stale: look again.
    return WebDriverWait(
        driver, WAIT_S, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
    ).until(test, message=what)


def shot(driver: Any, name: str, height: int | None = None) -> None:
    """Save a screenshot of the page when DPSYN_SCREENSHOTS names a folder."""
    if not SHOTS:
        return
    folder = Path(SHOTS)
    folder.mkdir(parents=True, exist_ok=True)
    full = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, height or min(max(full + 120, 600), 1900))
    from PIL import Image  # matplotlib's dependency

    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    with Image.open(path) as image:  # a 256-colour palette keeps the docs' PNGs small
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
    driver.set_window_size(1280, 1000)


def sign_in(driver: Any, live: LiveServer, key: str) -> None:
    driver.delete_all_cookies()
    driver.get(live.base + "/ui/login")
    by_id(driver, "api-key").send_keys(key)
    by_id(driver, "sign-in").click()
    wait_for(driver, lambda d: "/ui/login" not in d.current_url, "signed in")


def api(live: LiveServer, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=live.base, headers={"Authorization": f"Bearer {key}"}, timeout=WAIT_S
    )


def wait_job(client: httpx.Client, job_id: str, status: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] == status or time.monotonic() > deadline:
            assert job["status"] == status, job
            return job
        time.sleep(0.05)


def submit(client: httpx.Client, dataset_id: str, epsilon: float = 1.0) -> dict:
    body = {
        "dataset_id": dataset_id,
        "method": "tang",
        "epsilon": epsilon,
        "shots": 2,
        "params": FAST_PARAMS,
    }
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def test_an_admin_walks_through_the_dashboard(
    live_server: LiveServer, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.support.ui import Select

    live, driver = live_server, browser
    live.backend.gate.clear()
    driver.get(live.base + "/ui/datasets")
    # not signed in: the sign-in page, which comes back to the page asked for (issue 34)
    assert driver.current_url.endswith("/ui/login?next=%2Fui%2Fdatasets")
    shot(driver, "login", 620)
    by_id(driver, "api-key").send_keys("dpsyn_not-a-key")
    by_id(driver, "sign-in").click()
    assert "Invalid or revoked API key" in by_id(driver, "login-error").text
    by_id(driver, "api-key").send_keys(live.admin)
    by_id(driver, "sign-in").click()
    wait_for(driver, lambda d: d.current_url.endswith("/ui/datasets"), "back on the page")

    # Upload a dataset through the form (a real file input).
    rows = tmp_path / "questions.csv"
    rows.write_bytes(csv_bytes(toy_rows()))
    by_id(driver, "upload-file").send_keys(str(rows))
    css(driver, "input[name=name]")[0].send_keys("questions")
    Select(by_id(driver, "upload-task")).select_by_value("custom")
    css(driver, "textarea[name=task_spec]")[0].send_keys(json.dumps(TOY_TASK))
    by_id(driver, "upload-submit").click()
    wait_for(driver, lambda d: "/ui/datasets/" in d.current_url, "the dataset page")
    dataset_id = driver.current_url.rsplit("/", 1)[1]
    assert by_id(driver, "no-budget").is_displayed()

    # Set its budget.
    by_id(driver, "budget-epsilon-input").send_keys("3")
    by_id(driver, "budget-submit").click()
    wait_for(driver, lambda d: css(d, "#budget-epsilon"), "the budget")
    assert float(by_id(driver, "budget-epsilon").text) == 3.0
    assert float(by_id(driver, "budget-spent").text) == 0.0

    # The job form: the method's parameters, and the planner's quote before submitting.
    Select(by_id(driver, "job-method")).select_by_value("tang")
    assert not by_id(driver, "param-M").get_attribute("disabled")
    assert by_id(driver, "param-teachers").get_attribute("disabled")  # promptpate's
    by_id(driver, "job-epsilon").send_keys("1")
    shots_input = by_id(driver, "job-shots")
    shots_input.clear()
    shots_input.send_keys("2")
    accounting = Select(by_id(driver, "job-accounting"))
    assert accounting.first_selected_option.get_attribute("value") == ""  # the budget's
    accounting.select_by_value("tight")
    for name, value in FAST_PARAMS.items():
        by_id(driver, f"param-{name}").send_keys(str(value))
    by_id(driver, "job-quote").click()
    quote = wait_for(driver, lambda d: css(d, "#quote-result"), "the quote")[0]
    costs = re.search(r"This job costs ε = ([0-9.]+) \(δ = 1e-6\)", quote.text)
    assert costs and 0.99 <= float(costs.group(1)) <= 1.0, quote.text  # the public delta
    # each figure with the delta it holds at (issue 55): the spends the budget's, the plain
    # sum its jobs' and count release's summed, as the server printed them
    assert "Composed spend at the budget's δ = 1e-6: " in quote.text, quote.text
    assert re.search(r"plain sum after: [0-9.]+ at δ = [0-9.e-]+, the jobs' δ summed", quote.text)
    assert "It fits." in quote.text

    # Submit, and watch it finish on the job page without reloading it.
    by_id(driver, "job-submit").click()
    wait_for(driver, lambda d: "/ui/jobs/" in d.current_url, "the job page")
    job_id = driver.current_url.rsplit("/", 1)[1]
    assert by_id(driver, "job-status").text in ("queued", "running")
    assert "tight accounting" in by_id(driver, "job").text  # the form's choice, sent
    assert by_id(driver, "job").get_attribute("data-live") == "yes"
    driver.execute_script("window.dpsynSamePage = true;")
    live.backend.gate.set()
    wait_for(driver, lambda d: by_id(d, "job-status").text == "succeeded", "the job to finish")
    assert driver.execute_script("return window.dpsynSamePage === true;")  # updated live
    # the charge the script wrote in prints as the plan (one number, one rule: issue 55)
    assert by_id(driver, "job-charged").text == by_id(driver, "job-planned").text
    assert css(driver, "#job-cancel") == []  # a finished job has no cancel button
    assert css(driver, '[data-field="finished"]')[0].text.endswith(" UTC")
    prompt_link = wait_for(driver, lambda d: by_id(d, "job-prompt").is_displayed(), "link")
    assert prompt_link
    shot(driver, "job")

    # Two more jobs: one running (held by the gate), one queued behind it and cancelled
    # from the jobs page, which releases its reservation.
    client = api(live, live.admin)
    live.backend.gate.clear()
    running = submit(client, dataset_id, 0.5)
    queued = submit(client, dataset_id, 0.5)
    wait_job(client, running["id"], "running")
    driver.get(live.base + "/ui/jobs")
    row = css(driver, f'tr[data-job-id="{queued["id"]}"]')[0]
    assert row.find_element("css selector", '[data-field="status"]').text == "queued"
    shot(driver, "jobs")
    row.find_element("css selector", "form[data-field=cancel] button").click()
    wait_for(driver, lambda d: by_id(d, "job-status").text == "cancelled", "the cancellation")
    live.backend.gate.set()
    wait_job(client, running["id"], "succeeded")

    # The prompt: ID with a copy button, demonstrations, epsilon, and a query box.
    driver.get(live.base + f"/ui/jobs/{job_id}")
    by_id(driver, "job-prompt").click()
    wait_for(driver, lambda d: "/ui/prompts/" in d.current_url, "the prompt page")
    prompt_id = driver.current_url.rsplit("/", 1)[1]
    assert by_id(driver, "prompt-id").text == prompt_id
    by_id(driver, "copy-id").click()
    wait_for(driver, lambda d: css(d, "[data-copied]")[0].is_displayed(), "copied")
    # every served demonstration is shown: two, unless the noise made one only a label's
    # name (the toy labels are words of the fake model), which is left out and noted
    served = client.get(f"/v1/prompts/{prompt_id}").json()["demonstrations"]
    assert 1 <= len(served) <= 2
    assert len(css(driver, "#demonstrations tbody tr")) == len(served)
    epsilon, delta = by_id(driver, "prompt-privacy").text.split(" / ")
    assert 0.99 <= float(epsilon) <= 1.0 and delta == "1e-6"  # the public delta, not 1/|D|
    by_id(driver, "query").send_keys("one two three")
    by_id(driver, "complete-submit").click()
    answer = wait_for(driver, lambda d: css(d, "#answer-label"), "the answer")[0]
    assert answer.text == "w5"  # what the fake backend predicts for a three-word query
    assert by_id(driver, "query").get_attribute("value") == "one two three"
    shot(driver, "prompt")

    # The dataset's spend: the page's numbers are the API's, priced by the ledger's filter
    # (two jobs one after the other: the Rényi filter, above their tight composition).
    budget = client.get(f"/v1/datasets/{dataset_id}/budget").json()
    assert budget["live_jobs"] == 2 and budget["composed"] < budget["spent"]
    assert budget["rule"] == "renyi_filter"
    driver.get(live.base + f"/ui/datasets/{dataset_id}")
    assert by_id(driver, "budget-spent").get_attribute("data-rule") == "renyi_filter"
    assert float(by_id(driver, "budget-spent").text) == pytest.approx(budget["spent"], rel=1e-3)
    assert float(by_id(driver, "budget-sum").text) == pytest.approx(budget["plain_sum"], rel=1e-3)
    assert len(css(driver, "#spend-chart .marker-reserve")) == 3
    assert len(css(driver, "#spend-chart .marker-commit")) == 2
    assert len(css(driver, "#spend-chart .marker-release")) == 1
    # the dataset's count release, drawn for the first job and charged once: its own marker,
    # ledger row, and line on the card
    assert len(css(driver, "#spend-chart .marker-counts")) == 1
    assert len(css(driver, "#ledger tbody tr")) == 7
    assert len(css(driver, "#ledger tbody tr.ledger-counts")) == 1
    assert float(by_id(driver, "budget-counts").text) == pytest.approx(
        budget["counts_epsilon"], rel=1e-3
    )
    shot(driver, "dataset")
    driver.get(live.base + "/ui/datasets")
    row = css(driver, f'tr[data-dataset-id="{dataset_id}"]')[0]
    spent = row.find_element("css selector", ".spent").text
    assert float(spent) == pytest.approx(budget["spent"], rel=1e-3)
    assert row.find_element("css selector", "svg.bar")
    shot(driver, "datasets")
    assert MARKER not in driver.page_source

    # A prompts:read sign-in sees the prompts only.
    sign_in(driver, live, live.reader)
    assert driver.current_url.endswith("/ui/prompts")
    assert css(driver, "#nav-datasets") == [] and prompt_id in driver.page_source
    shot(driver, "prompts-reader", 560)
    driver.get(live.base + "/ui/datasets")
    assert "prompts only" in by_id(driver, "error-message").text

    # Signing out ends the session.
    by_id(driver, "sign-out").click()
    wait_for(driver, lambda d: d.current_url.endswith("/ui/login"), "signed out")
    driver.get(live.base + "/ui/prompts")
    assert driver.current_url.endswith("/ui/login?next=%2Fui%2Fprompts")


def _seed(live: LiveServer) -> tuple[str, dict]:
    """A dataset of tenant A with a budget and one finished job, through the API."""
    client = api(live, live.admin)
    live.backend.gate.set()
    uploaded = client.post(
        "/v1/datasets",
        files={"file": ("rows.csv", csv_bytes(toy_rows()), "text/csv")},
        data={"task": json.dumps(TOY_TASK)},
    )
    assert uploaded.status_code == 201, uploaded.text
    dataset_id = uploaded.json()["id"]
    assert client.put(f"/v1/datasets/{dataset_id}/budget", json={"epsilon": 3}).is_success
    job = wait_job(client, submit(client, dataset_id)["id"], "succeeded")
    return dataset_id, job


class _Attacker:
    """Another web server, serving a page whose form posts to the dashboard on load."""

    def __init__(self, target: str, fields: dict[str, str]) -> None:
        inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
        page = (
            f'<html><body><form id="f" method="post" action="{target}">{inputs}</form>'
            "<script>document.getElementById('f').submit()</script></body></html>"
        ).encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.server.daemon_threads = True  # a browser keeps idle preconnected sockets open
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Attacker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def seeded(live_server: LiveServer) -> Iterator[tuple[str, dict]]:
    yield _seed(live_server)


def test_another_tenant_sees_not_found_and_a_forged_form_changes_nothing(
    live_server: LiveServer, browser: Any, seeded: tuple[str, dict]
) -> None:
    live, driver = live_server, browser
    dataset_id, job = seeded

    # Tenant B, signed in, cannot open tenant A's dataset, job or prompt.
    sign_in(driver, live, live.other)
    for path in (
        f"/ui/datasets/{dataset_id}",
        f"/ui/jobs/{job['id']}",
        f"/ui/prompts/{job['prompt_id']}",
    ):
        driver.get(live.base + path)
        assert css(driver, "h1")[0].text == "Not found", path
        assert "not found" in by_id(driver, "error-message").text
    driver.get(live.base + "/ui/datasets")
    assert dataset_id not in driver.page_source

    # Tenant A signed in; a page on another origin posts a budget change on load. The
    # browser sends the session cookie (same site: another port of 127.0.0.1), but the
    # form has no CSRF token: refused. From another site (localhost), the SameSite=Strict
    # cookie is not even sent.
    sign_in(driver, live, live.admin)
    target = f"{live.base}/ui/datasets/{dataset_id}/budget"
    with _Attacker(target, {"epsilon": "100", "csrf": "guessed"}) as attacker:
        driver.get(f"http://127.0.0.1:{attacker.port}/")
        wait_for(driver, lambda d: d.current_url == target, "the forged post")
        assert "CSRF" in by_id(driver, "error-message").text
        driver.get(f"http://localhost:{attacker.port}/")
        wait_for(driver, lambda d: d.current_url == target, "the cross-site post")
        assert "not signed in" in driver.page_source
    budget = api(live, live.admin).get(f"/v1/datasets/{dataset_id}/budget").json()
    assert budget["epsilon"] == 3
    driver.get(live.base + f"/ui/datasets/{dataset_id}")  # still signed in, unchanged
    assert float(by_id(driver, "budget-epsilon").text) == 3.0
