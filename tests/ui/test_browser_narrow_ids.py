"""Long IDs on a 360 px screen (issue 34): every page that prints a job's, prompt's, dataset's
or key's ID (32 hexadecimal characters, unbroken) wraps it inside the viewport; the page never
scrolls sideways (a wide table scrolls in its own box). Headless Chromium emulating a
360 x 740 phone, on a dataset, a public dataset, a finished job and its prompt."""

from __future__ import annotations

import json
from typing import Any

from tests.api.conftest import MARKER, TOY_TASK, csv_bytes, toy_rows
from tests.ui.conftest import LiveServer
from tests.ui.test_browser import api, css, sign_in, submit, wait_job

WIDTH, HEIGHT = 360, 740


def _ids(live: LiveServer) -> dict[str, str]:
    """A private dataset with a budget, a public one, a finished job and its prompt."""
    client = api(live, live.admin)
    uploaded = client.post(
        "/v1/datasets",
        files={"file": ("rows.csv", csv_bytes(toy_rows()), "text/csv")},
        data={"task": json.dumps(TOY_TASK), "name": "questions"},
    )
    assert uploaded.status_code == 201, uploaded.text
    dataset_id = uploaded.json()["id"]
    assert client.put(f"/v1/datasets/{dataset_id}/budget", json={"epsilon": 3}).is_success
    public = client.post("/v1/datasets", json={"public": True, "records": [{"text": "a"}] * 3})
    assert public.status_code == 201, public.text
    live.backend.gate.set()
    job = wait_job(client, submit(client, dataset_id)["id"], "succeeded")
    return {
        "dataset": dataset_id,
        "public": public.json()["id"],
        "job": job["id"],
        "prompt": job["prompt_id"],
    }


def _overflow(driver: Any) -> list[str]:
    """What sticks out of the viewport's width: the page itself, or any element holding an
    ID of 32 hexadecimal characters, unless it is a table's cell in a wrapper that scrolls
    (a card that scrolls sideways to show an ID does not count: the ID must wrap)."""
    return list(
        driver.execute_script(
            """
            const width = document.documentElement.clientWidth;
            const out = [];
            if (document.documentElement.scrollWidth > width) {
              out.push("page " + document.documentElement.scrollWidth);
            }
            const scrolls = (el) => {  // a table's cell, in a wrapper that scrolls
              if (!el.closest("table")) return false;
              for (let p = el.parentElement; p; p = p.parentElement) {
                const s = getComputedStyle(p).overflowX;
                if ((s === "auto" || s === "scroll") && p.scrollWidth > p.clientWidth) return true;
              }
              return false;
            };
            for (const el of document.querySelectorAll("body *")) {
              const own = [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.data);
              if (!/[0-9a-f]{32}/.test(own.join(""))) continue;
              const r = el.getBoundingClientRect();
              if ((r.left < 0 || r.right > width + 0.5) && !scrolls(el)) {
                out.push(el.tagName + " " + (el.id || el.className) + " " + Math.round(r.right));
              }
            }
            return out;
            """
        )
    )


def test_long_ids_stay_inside_a_360_px_screen(live_server: LiveServer, browser: Any) -> None:
    live, driver = live_server, browser
    ids = _ids(live)
    sign_in(driver, live, live.admin)
    metrics = {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": True}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    pages = [
        "/ui/datasets",
        f"/ui/datasets/{ids['dataset']}",
        f"/ui/datasets/{ids['public']}",
        "/ui/jobs",
        f"/ui/jobs/{ids['job']}",
        "/ui/prompts",
        f"/ui/prompts/{ids['prompt']}",
    ]
    try:
        for path in pages:
            driver.get(live.base + path)
            assert driver.execute_script("return document.documentElement.clientWidth") == WIDTH
            # the page really prints a whole ID (else there is nothing to wrap)
            assert any(i in driver.page_source for i in ids.values()), path
            assert _overflow(driver) == [], path
            assert MARKER not in driver.page_source
        driver.get(live.base + f"/ui/prompts/{ids['prompt']}")
        prompt_id = css(driver, "#prompt-id")[0]
        assert prompt_id.text.replace("\n", "") == ids["prompt"]  # wrapped, not cut
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
