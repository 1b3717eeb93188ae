"""The fleet page in a real browser (headless Chromium, issue 34): an org:read sign-in lands on
it; it shows every tenant's budgeted datasets with their state (ok / warn / over), a running
job, filters that submit on change and sortable headings; a tenant page refuses it; and 360 px
wide nothing is cut off (long names and IDs wrap, no sideways scrolling of the page).

With ``DPSYN_SCREENSHOTS=<folder>`` it saves ``fleet.png`` and ``fleet-narrow.png`` (the
screenshots of docs/dashboard.md).
"""

from __future__ import annotations

import time
from typing import Any

from app.db.models import KeyScope
from app.db.session import session_scope
from app.services.tenants import create_key_for, create_tenant
from tests.api.conftest import FAST_PARAMS
from tests.ui.conftest import LiveServer
from tests.ui.test_browser import api, by_id, css, shot, sign_in, wait_for, wait_job
from tests.ui.test_browser_budgets import (
    _dataset,
    _inside,
    _no_sideways_scroll,
    _submit,
    shot_narrow,
)


def _org_key(live: LiveServer) -> str:
    with session_scope(live.url) as session:
        tenant, _ = create_tenant(session, f"organisation-{time.monotonic_ns()}")
        return create_key_for(session, tenant, KeyScope.ORG_READ, "finance dashboard")[1]


def _levels(driver: Any) -> dict[str, str]:
    return {
        row.get_attribute("data-dataset-id"): row.get_attribute("data-level")
        for row in css(driver, "#fleet tbody tr[data-dataset-id]")
    }


def test_an_org_key_watches_the_fleet(live_server: LiveServer, browser: Any) -> None:
    from selenium.webdriver.support.ui import Select

    live, driver = live_server, browser
    live.backend.gate.set()
    a, b = api(live, live.admin), api(live, live.other)
    warn = _dataset(a, "customer-support-tickets-2026-with-a-rather-long-name", 2.0,
                    warn_threshold=0.4)  # fmt: skip
    _submit(a, warn, 1.0, "w5")
    over = _dataset(a, "churn-survey", 2.0)
    _submit(a, over, 1.0, "w5")
    spent = a.get(f"/v1/datasets/{over}/budget").json()["spent"]
    assert a.put(f"/v1/datasets/{over}/budget", json={"epsilon": spent}).is_success  # used up
    ok = _dataset(b, "billing-notes", 5.0)
    live.backend.gate.clear()  # B's job stays running while the page is looked at
    running = b.post(
        "/v1/jobs",
        json={"dataset_id": ok, "method": "tang", "epsilon": 0.5, "shots": 1,
              "params": FAST_PARAMS},
    )  # fmt: skip
    assert running.status_code == 201, running.text
    job_id = running.json()["id"]
    wait_job(b, job_id, "running")
    try:
        sign_in(driver, live, _org_key(live))
        assert driver.current_url.endswith("/ui/fleet")
        levels = _levels(driver)
        assert {warn: "warn", over: "over", ok: "ok"}.items() <= levels.items()
        ok_row = css(driver, f'#fleet tr[data-dataset-id="{ok}"]')[0]
        assert ok_row.find_element("css selector", "td.running").text.startswith("1")
        assert css(driver, f'#fleet tr[data-dataset-id="{warn}"] td.last-job')[0].text != "—"
        shot(driver, "fleet")

        # Sorting by a heading, then filtering by a select (the form submits on change).
        css(driver, 'a.sort[data-sort="used"]')[0].click()
        wait_for(driver, lambda d: "sort=used" in d.current_url, "sorted by use")
        css(driver, 'a.sort[data-sort="used"]')[0].click()
        wait_for(driver, lambda d: "order=asc" in d.current_url, "sorted emptiest first")
        ids = [r.get_attribute("data-dataset-id") for r in css(driver, "#fleet tbody tr")]
        assert ids.index(ok) < ids.index(warn) < ids.index(over)
        Select(by_id(driver, "fleet-filters-level")).select_by_value("over")
        wait_for(driver, lambda d: "level=over" in d.current_url, "filtered")
        assert set(_levels(driver).values()) == {"over"} and over in _levels(driver)

        # A tenant page refuses the org sign-in, naming why.
        driver.get(live.base + "/ui/datasets")
        assert "sees the fleet page only" in driver.page_source

        # 360 px: the header and the table's cells fit, long names wrap.
        metrics = {"width": 360, "height": 780, "deviceScaleFactor": 1, "mobile": True}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        try:
            driver.get(live.base + "/ui/fleet")
            assert driver.execute_script("return document.documentElement.clientWidth") == 360
            assert _inside(driver, by_id(driver, "sign-out"))
            assert _inside(driver, by_id(driver, "fleet-csv"))
            row = css(driver, f'#fleet tr[data-dataset-id="{warn}"]')[0]
            for cell in ("dataset", "budget", "spent", "used", "level-cell", "running"):
                element = row.find_element("css selector", f"td.{cell}")
                assert element.is_displayed() and _inside(driver, element), cell
            assert _no_sideways_scroll(driver)
            shot_narrow(driver, "fleet-narrow")
        finally:
            driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    finally:
        live.backend.gate.set()
    wait_job(b, job_id, "succeeded")
