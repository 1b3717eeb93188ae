"""The job page in a real browser (issue 24, items 1 and 3): a queued job cancelled from its
page gets its epsilon back; a running job that has read the data, cancelled from its page,
ends charged, and the page shows the charge change live; the jobs table's charged-epsilon
column and its status filter. No page shows record text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import MARKER, TOY_TASK, csv_bytes, toy_rows
from tests.ui.conftest import LiveServer
from tests.ui.test_browser import api, by_id, css, sign_in, submit, wait_for, wait_job


def _dataset(live: LiveServer) -> str:
    client = api(live, live.admin)
    uploaded = client.post(
        "/v1/datasets",
        files={"file": ("rows.csv", csv_bytes(toy_rows()), "text/csv")},
        data={"task": json.dumps(TOY_TASK), "name": "questions"},
    )
    assert uploaded.status_code == 201, uploaded.text
    dataset_id = uploaded.json()["id"]
    assert client.put(f"/v1/datasets/{dataset_id}/budget", json={"epsilon": 3}).is_success
    return dataset_id


def test_the_job_page_tells_what_a_cancelled_job_costs(
    live_server: LiveServer, browser: Any
) -> None:
    live, driver = live_server, browser
    client = api(live, live.admin)
    dataset_id = _dataset(live)
    live.backend.gate.clear()  # the first job holds the worker, after its read mark
    running = submit(client, dataset_id, 0.5)
    queued = submit(client, dataset_id, 0.5)
    wait_job(client, running["id"], "running")
    sign_in(driver, live, live.admin)

    # The queued job: reserved; cancelled from its page, its epsilon comes back.
    driver.get(live.base + f"/ui/jobs/{queued['id']}")
    assert by_id(driver, "job-charge").text == "reserved"
    assert by_id(driver, "job-dataset").text == "questions"
    by_id(driver, "job-cancel").click()
    wait_for(driver, lambda d: by_id(d, "job-status").text == "cancelled", "the cancellation")
    assert by_id(driver, "job-charge").text == "released"
    assert float(by_id(driver, "job-charged").text) == 0.0
    assert "before it read any private record" in by_id(driver, "job-charge-note").text

    # The running job has read the data: cancelling it keeps the charge, shown live.
    wait_for(
        driver,
        lambda d: client.get(f"/v1/jobs/{running['id']}").json()["read_private_data"],
        "the read mark",
    )
    driver.get(live.base + f"/ui/jobs/{running['id']}")
    assert "stays charged however it ends" in by_id(driver, "job-charge-note").text
    by_id(driver, "job-cancel").click()
    wait_for(driver, lambda d: "cancellation requested" in by_id(d, "job").text, "the request")
    driver.execute_script("window.dpsynSamePage = true;")
    live.backend.gate.set()
    wait_for(driver, lambda d: by_id(d, "job-charge").text == "charged", "the final charge")
    assert driver.execute_script("return window.dpsynSamePage === true;")  # updated live
    assert by_id(driver, "job-status").text in ("cancelled", "succeeded")
    assert float(by_id(driver, "job-charged").text) == pytest.approx(running["epsilon"], 1e-3)
    assert by_id(driver, "job-duration").text != "—"
    assert MARKER not in driver.page_source

    # The jobs table: a charged-epsilon column, and a status filter.
    driver.get(live.base + "/ui/jobs?status=cancelled")
    rows = css(driver, "#jobs-table tbody tr[data-job-id]")
    assert queued["id"] in {row.get_attribute("data-job-id") for row in rows}
    row = css(driver, f'tr[data-job-id="{queued["id"]}"]')[0]
    assert float(row.find_element("css selector", '[data-field="charged"]').text) == 0.0
    assert all(
        r.find_element("css selector", '[data-field="status"]').text == "cancelled" for r in rows
    )
    assert MARKER not in driver.page_source
