"""The budget views in a real browser (headless Chromium, issue 24): the per-label table and
its binding group, the quote's per-group breakdown, the threshold colours as the browser
paints them, and a usable layout 360 px wide (nothing cut off: Sign out and the budget column
inside the viewport, no sideways scrolling of the page).

With ``DPSYN_SCREENSHOTS=<folder>`` it saves the budget screenshots of docs/dashboard.md.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import httpx

from tests.api.conftest import FAST_PARAMS, MARKER, TOY_TASK, csv_bytes, toy_rows
from tests.ui.conftest import LiveServer
from tests.ui.test_browser import api, by_id, css, shot, sign_in, wait_for, wait_job

# The levels' colours: the bar's SVG fill attribute, and the card's border as painted.
LEVEL_RGB_HEX = {"ok": "#16a34a", "warn": "#f59e0b", "over": "#dc2626"}
LEVEL_RGB = {"ok": "rgb(22, 163, 74)", "warn": "rgb(245, 158, 11)", "over": "rgb(220, 38, 38)"}


@contextmanager
def labels_drawn(label: str) -> Iterator[None]:
    """The planner's (public, random) label schedule draws ``label`` for every shot; the
    server runs in this process, so the patch reaches its planner."""
    with mock.patch("app.synthesis.generator.label_schedule", lambda _labels, n, _rng: [label] * n):
        yield


def _submit(client: httpx.Client, dataset_id: str, epsilon: float, label: str) -> dict:
    body = {
        "dataset_id": dataset_id,
        "method": "tang",
        "epsilon": epsilon,
        "shots": 1,
        "params": FAST_PARAMS,
    }
    with labels_drawn(label):
        response = client.post("/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return wait_job(client, response.json()["id"], "succeeded")


def _dataset(client: httpx.Client, name: str, epsilon: float, **budget: Any) -> str:
    uploaded = client.post(
        "/v1/datasets",
        files={"file": ("rows.csv", csv_bytes(toy_rows()), "text/csv")},
        data={"task": json.dumps(TOY_TASK), "name": name},
    )
    assert uploaded.status_code == 201, uploaded.text
    dataset_id = uploaded.json()["id"]
    put = client.put(f"/v1/datasets/{dataset_id}/budget", json={"epsilon": epsilon, **budget})
    assert put.is_success, put.text
    return str(dataset_id)


def _fill(driver: Any, selector: str) -> str:
    return str(
        driver.execute_script(f"return document.querySelector('{selector}').getAttribute('fill');")
    )


def _border(driver: Any) -> str:
    """The budget card's left border colour, as the browser paints it."""
    return str(
        driver.execute_script(
            "return getComputedStyle(document.getElementById('budget')).borderLeftColor;"
        )
    )


def test_per_label_view_quote_and_threshold_colours(live_server: LiveServer, browser: Any) -> None:
    live, driver = live_server, browser
    live.backend.gate.set()
    client = api(live, live.admin)
    dataset_id = _dataset(client, "questions", 4.0)
    _submit(client, dataset_id, 2.0, "w5")
    _submit(client, dataset_id, 0.5, "w7")  # the other group: 0 extra for the dataset
    budget = client.get(f"/v1/datasets/{dataset_id}/budget").json()

    sign_in(driver, live, live.admin)
    driver.get(live.base + f"/ui/datasets/{dataset_id}")
    rows = css(driver, "#label-groups tbody tr")
    assert [r.get_attribute("data-group") for r in rows] == ["w5", "w7"]
    assert rows[0].get_attribute("data-binding") == "yes" and "binding" in rows[0].get_attribute(
        "class"
    )
    assert "sets the dataset's spend" in rows[0].text
    assert rows[1].get_attribute("data-binding") is None
    assert by_id(driver, "binding-group").text == "w5"
    assert "0 extra" in by_id(driver, "label-explain").text
    # ok: green; the bar says its percentage
    assert by_id(driver, "budget").get_attribute("data-level") == "ok"
    assert _fill(driver, "#budget svg.bar .bar-composed") == LEVEL_RGB_HEX["ok"]
    percent = math.floor(budget["spent"] / 4.0 * 100 + 1e-6)  # rounded down, as printed
    assert css(driver, "#budget svg.bar .bar-percent")[0].text == f"{percent}%"

    # The quote box: a job on w7 again moves only w7, and the dataset's spend stays.
    by_id(driver, "job-epsilon").send_keys("0.3")
    shots_input = by_id(driver, "job-shots")
    shots_input.clear()
    shots_input.send_keys("1")
    for name, value in FAST_PARAMS.items():
        by_id(driver, f"param-{name}").send_keys(str(value))
    with labels_drawn("w7"):
        by_id(driver, "job-quote").click()
        table = wait_for(driver, lambda d: css(d, "#quote-groups"), "the quote's groups")[0]
    quoted = {
        r.get_attribute("data-group"): r.text
        for r in table.find_elements("css selector", "tr[data-group]")
    }
    assert "charged by this job" in quoted["w7"]
    assert "sets the dataset's spend" in quoted["w5"]
    assert "adds 0" in by_id(driver, "quote-result").text
    element_shot(by_id(driver, "job-form"), "quote")
    driver.execute_script("window.scrollTo(0, 0);")
    shot(driver, "dataset-labels", 1000)

    # A warn threshold of 40% through the form: amber on the page, the bar and the table.
    warn = by_id(driver, "budget-warn-input")
    warn.clear()
    warn.send_keys("40")
    by_id(driver, "budget-submit").click()
    wait_for(driver, lambda d: by_id(d, "budget").get_attribute("data-level") == "warn", "warn")
    assert _border(driver) == LEVEL_RGB["warn"]
    assert _fill(driver, "#budget svg.bar .bar-composed") == LEVEL_RGB_HEX["warn"]
    assert by_id(driver, "budget-level").text == "warn"
    driver.get(live.base + "/ui/datasets?level=warn")
    row = css(driver, f'tr[data-dataset-id="{dataset_id}"]')[0]
    assert row.get_attribute("data-level") == "warn"
    assert row.find_element("css selector", ".level-warn").text == f"{percent}% warn"

    # Used up: a budget lowered to exactly the spend is "over", red.
    now = client.get(f"/v1/datasets/{dataset_id}/budget").json()
    assert now["delta"] == budget["delta"]  # the form sent the budget's delta back unchanged
    used_up = {"epsilon": now["spent"], "delta": now["delta"]}
    assert client.put(f"/v1/datasets/{dataset_id}/budget", json=used_up).is_success
    driver.get(live.base + f"/ui/datasets/{dataset_id}")
    assert by_id(driver, "budget").get_attribute("data-level") == "over"
    assert _border(driver) == LEVEL_RGB["over"]
    assert _fill(driver, "#budget svg.bar .bar-composed") == LEVEL_RGB_HEX["over"]
    assert MARKER not in driver.page_source


def _inside(driver: Any, element: Any) -> bool:
    """Whether ``element`` lies wholly within the viewport's width."""
    left, right, width = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return [r.left, r.right, document.documentElement.clientWidth];",
        element,
    )
    return bool(left >= 0 and right <= width + 0.5)


def _no_sideways_scroll(driver: Any) -> bool:
    """Whether the page fits the viewport's width (a wide table scrolls in its own box)."""
    return bool(
        driver.execute_script(
            "return document.documentElement.scrollWidth <= "
            "document.documentElement.clientWidth + 1;"
        )
    )


def test_a_360_px_screen_cuts_nothing_off(live_server: LiveServer, browser: Any) -> None:
    live, driver = live_server, browser
    live.backend.gate.set()
    client = api(live, live.admin)
    dataset_id = _dataset(client, "a-dataset-with-a-rather-long-name", 3.0, warn_threshold=0.5)
    _submit(client, dataset_id, 1.0, "w5")
    sign_in(driver, live, live.admin)
    metrics = {"width": 360, "height": 780, "deviceScaleFactor": 1, "mobile": True}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        driver.get(live.base + "/ui/datasets")
        assert driver.execute_script("return document.documentElement.clientWidth") == 360
        assert _inside(driver, by_id(driver, "sign-out"))
        assert _inside(driver, by_id(driver, "nav-jobs"))
        row = css(driver, f'tr[data-dataset-id="{dataset_id}"]')[0]
        for cell in ("budget", "spent", "remaining", "used", "plain-sum"):
            element = row.find_element("css selector", f"td.{cell}")
            assert element.is_displayed() and _inside(driver, element), cell
        assert _no_sideways_scroll(driver)
        shot_narrow(driver, "datasets-narrow")

        driver.get(live.base + f"/ui/datasets/{dataset_id}")
        assert _inside(driver, by_id(driver, "sign-out"))
        for element_id in ("budget-epsilon", "budget-spent", "budget-remaining", "budget-used"):
            assert _inside(driver, by_id(driver, element_id)), element_id
        assert _inside(driver, by_id(driver, "label-groups").find_element("xpath", ".."))
        assert _no_sideways_scroll(driver)
        for path in ("/ui/jobs", "/ui/prompts"):  # the header wraps on every page
            driver.get(live.base + path)
            assert _inside(driver, by_id(driver, "sign-out")), path
            assert _no_sideways_scroll(driver), path
        by_id(driver, "sign-out").click()
        wait_for(driver, lambda d: d.current_url.endswith("/ui/login"), "signed out")
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def _save(name: str, take: Callable[[str], Any]) -> None:
    """Save a screenshot (``take(path)``) as a 256-colour PNG when DPSYN_SCREENSHOTS names a
    folder (as ``tests.ui.test_browser.shot`` does)."""
    folder = os.environ.get("DPSYN_SCREENSHOTS")
    if not folder:
        return
    from PIL import Image

    path = Path(folder) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    take(str(path))
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


def shot_narrow(driver: Any, name: str) -> None:
    """A screenshot at the emulated 360 px (``shot`` resizes the window to 1280)."""
    _save(name, driver.save_screenshot)


def element_shot(element: Any, name: str) -> None:
    """A screenshot of one element (the quote box with its breakdown)."""
    _save(name, element.screenshot)
