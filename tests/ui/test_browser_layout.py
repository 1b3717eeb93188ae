"""The dashboard's lists, prompt page and keys page at a phone's width and a desktop's (issue 55,
item 6), in headless Chromium: at 360 px the jobs, prompts and keys lists fit the screen (no
sideways scroll, of the page or of the list's own box), every cell still shown with its
heading, each ID on one line (never broken every two characters); the "Calibrated" checkbox
sits on its label's first line at both widths; the keys page shows each key's usage as
``GET /v1/keys`` (and ``dpsyn keys list``) counts it; the prompt and job pages name the
validation set and the submitting key rather than print their IDs.

Each page is also saved as a screenshot at both widths under the test's temporary folder
(``DPSYN_SCREENSHOTS=<folder>`` keeps them there instead), to look at when one fails.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import FAST_PARAMS, MARKER, TOY_TASK, csv_bytes, toy_rows
from tests.api.test_validation import VALID, validation_rows
from tests.ui.conftest import LiveServer
from tests.ui.test_browser import api, by_id, css, sign_in, submit, wait_for, wait_job

NARROW, WIDE = 360, 1280
HEIGHT = 900
CHATS = 3  # answers the app key asks for: its usage on the keys page


@dataclass
class Seeded:
    dataset: str
    validation: str
    job: str
    prompt: str
    app_key: str  # a named prompts:read key's ID, used CHATS times
    ops_key: str  # a named admin key's ID, which submitted the job


def _named_key(client: httpx.Client, scope: str, name: str) -> tuple[str, str]:
    created = client.post("/v1/keys", json={"scope": scope, "name": name})
    assert created.status_code == 201, created.text
    return created.json()["id"], created.json()["key"]


def _seed(live: LiveServer) -> Seeded:
    """A named dataset with a budget, a named validation set, a finished and scored job that
    a named admin key submitted, a live job beside it, and a named app key that asked for
    :data:`CHATS` answers."""
    admin = api(live, live.admin)
    uploaded = admin.post(
        "/v1/datasets",
        files={"file": ("rows.csv", csv_bytes(toy_rows()), "text/csv")},
        data={"task": json.dumps(TOY_TASK), "name": "support tickets"},
    )
    assert uploaded.status_code == 201, uploaded.text
    dataset = uploaded.json()["id"]
    assert admin.put(f"/v1/datasets/{dataset}/budget", json={"epsilon": 5}).is_success
    body = {
        "public": True,
        "labelled": True,
        "task": TOY_TASK,
        "records": validation_rows(),
        "name": "held-out tickets",
    }
    validation = admin.post("/v1/datasets", json=body)
    assert validation.status_code == 201, validation.text
    ops_id, ops_raw = _named_key(admin, "admin", "ops laptop")
    ops = api(live, ops_raw)
    live.backend.gate.set()
    asked = {
        "dataset_id": dataset,
        "method": "tang",
        "epsilon": 1.0,
        "shots": 2,
        "params": FAST_PARAMS,
        "validation_dataset_id": validation.json()["id"],
    }
    created = ops.post("/v1/jobs", json=asked)
    assert created.status_code == 201, created.text
    job = wait_job(admin, created.json()["id"], "succeeded")
    wait_for(
        None,
        lambda _: (
            admin.get(f"/v1/prompts/{job['prompt_id']}").json()["validation"]["status"] == "scored"
        ),
        "the validation score",
    )
    live.backend.gate.clear()
    submit(admin, dataset, 0.5)  # held by the gate: a live row, with its cancel button
    app_id, app_raw = _named_key(admin, "prompts:read", "support app")
    app = api(live, app_raw)
    for _ in range(CHATS):
        question = {"role": "user", "content": "Question: where is the river ?"}
        answer = app.post(
            "/v1/chat/completions",
            json={"model": job["prompt_id"], "messages": [question], "max_tokens": 2},
        )
        assert answer.status_code == 200, answer.text
    return Seeded(dataset, validation.json()["id"], job["id"], job["prompt_id"], app_id, ops_id)


@pytest.fixture
def seeded(live_server: LiveServer) -> Iterator[Seeded]:
    try:
        yield _seed(live_server)
    finally:
        live_server.backend.gate.set()  # the held job ends


def _width(driver: Any, width: int) -> None:
    """The viewport ``width`` px wide (a phone's below 600 px)."""
    metrics = {"width": width, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": width < 600}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def _screenshot(driver: Any, folder: Path, name: str, width: int) -> Path:
    """The whole page at ``width`` as ``<name>-<width>.png``."""
    full = int(driver.execute_script("return document.documentElement.scrollHeight"))
    metrics = {
        "width": width,
        "height": min(max(full, HEIGHT), 6000),
        "deviceScaleFactor": 1,
        "mobile": width < 600,
    }
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    path = folder / f"{name}-{width}.png"
    driver.save_screenshot(str(path))
    _width(driver, width)
    return path


def _sideways(driver: Any, selector: str) -> list[str]:
    """What scrolls sideways at this width: the page, the list ``selector`` past the
    viewport's right edge, or a box around the list that scrolls to show it."""
    return list(
        driver.execute_script(
            """
            const out = [], width = window.innerWidth, list = document.querySelector(arguments[0]);
            const page = document.documentElement.scrollWidth;
            if (page > width) out.push("page " + page + " > " + width);
            if (!list) return ["no " + arguments[0]];
            const right = list.getBoundingClientRect().right;
            if (right > width + 0.5) out.push("list ends at " + Math.round(right));
            for (let p = list; p && p !== document.documentElement; p = p.parentElement) {
              if (p.scrollWidth > p.clientWidth + 1) {
                out.push((p.id || p.tagName) + " scrolls " + p.scrollWidth + " > " + p.clientWidth);
              }
            }
            return out;
            """,
            selector,
        )
    )


def _broken_ids(driver: Any, selector: str) -> list[str]:
    """The IDs in the list (an element whose own text holds 12 or more hexadecimal
    characters: a whole ID, or its first 12 before "…") that wrap onto a second line, or may
    be broken anywhere (``word-break: break-all``)."""
    return list(
        driver.execute_script(
            """
            const out = [], hex = /[0-9a-f]{12}/;
            const texts = [...document.querySelectorAll(arguments[0] + " *")].flatMap(
              (el) => [...el.childNodes].filter((n) => n.nodeType === 3 && hex.test(n.data)));
            if (!texts.length) return ["no ID in " + arguments[0]];
            for (const text of texts) {
              const range = document.createRange();
              range.selectNodeContents(text);
              const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
              const style = getComputedStyle(text.parentElement);
              if (tops.size !== 1 || style.wordBreak === "break-all") {
                out.push(text.data.trim() + ": " + tops.size + " lines, " + style.wordBreak);
              }
            }
            return out;
            """,
            selector,
        )
    )


def _hidden_cells(driver: Any, selector: str) -> list[str]:
    """The list's cells with text that the page does not show, or shows without its
    column's heading (a stacked row labels each cell; a table has its header row)."""
    return list(
        driver.execute_script(
            """
            const out = [], list = document.querySelector(arguments[0]);
            const header = list.querySelector("thead");
            const headed = header && header.getClientRects().length > 0;
            for (const td of list.querySelectorAll("tbody td")) {
              if (!td.textContent.trim() || td.classList.contains("actions")) continue;
              if (!td.innerText.trim()) { out.push("hidden: " + td.textContent.trim()); continue; }
              const label = getComputedStyle(td, "::before").content;
              const first = td === td.parentElement.firstElementChild;
              if (!headed && !first && (label === "none" || label === '""')) {
                out.push("no heading: " + td.innerText.trim().slice(0, 40));
              }
            }
            return out;
            """,
            selector,
        )
    )


def _checkbox_beside_label(driver: Any) -> dict[str, Any]:
    """Where the "Calibrated" checkbox and its label's first line of text are."""
    return dict(
        driver.execute_script(
            """
            const box = document.getElementById("calibrated");
            const label = box.labels && box.labels[0];
            if (!label) return {labelled: false};
            const text = [...label.childNodes].find((n) => n.nodeType === 3 && n.data.trim());
            const range = document.createRange();
            range.selectNodeContents(text);
            const line = range.getClientRects()[0], b = box.getBoundingClientRect();
            return {labelled: true, text: text.data.trim().slice(0, 10),
                    boxMiddle: (b.top + b.bottom) / 2, lineTop: line.top,
                    lineBottom: line.bottom, gap: line.left - b.right};
            """
        )
    )


def _check_list(driver: Any, selector: str, width: int) -> None:
    if width == NARROW:
        assert _sideways(driver, selector) == [], selector
    assert _broken_ids(driver, selector) == [], selector
    assert _hidden_cells(driver, selector) == [], selector


def test_lists_and_pages_fit_both_widths(
    live_server: LiveServer, browser: Any, seeded: Seeded, tmp_path: Path
) -> None:
    live, driver = live_server, browser
    shots = Path(os.environ.get("DPSYN_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    keys = api(live, live.admin).get("/v1/keys").json()
    app = next(k for k in keys if k["id"] == seeded.app_key)
    assert app["usage_requests"] == CHATS  # what dpsyn keys list prints
    sign_in(driver, live, live.admin)
    saved = []
    try:
        for width in (NARROW, WIDE):
            _width(driver, width)
            driver.get(live.base + "/ui/jobs")
            assert driver.execute_script("return window.innerWidth") == width
            assert css(driver, f'tr[data-job-id="{seeded.job}"]')
            _check_list(driver, "#jobs-table", width)
            # sorting by a column stays within reach when the header row is folded away
            assert by_id(driver, "filter-sort").is_displayed()
            saved.append(_screenshot(driver, shots, "jobs", width))

            driver.get(live.base + "/ui/prompts")
            assert css(driver, f'tr[data-prompt-id="{seeded.prompt}"]')
            _check_list(driver, "#prompts", width)
            assert any(a.is_displayed() for a in css(driver, 'a[href*="sort=validation"]'))
            saved.append(_screenshot(driver, shots, "prompts", width))

            driver.get(live.base + "/ui/datasets")
            _check_list(driver, "#datasets", width)
            deltas = [e.text for e in css(driver, "#datasets .plain-sum-delta")]
            assert deltas and all(d.startswith("at δ ") for d in deltas), deltas
            assert all(e.is_displayed() for e in css(driver, "#datasets .plain-sum-delta"))
            saved.append(_screenshot(driver, shots, "datasets", width))

            driver.get(live.base + "/ui/keys")
            _check_list(driver, "#keys", width)
            row = css(driver, f'tr[data-key-id="{seeded.app_key}"]')[0]
            requests = row.find_element("css selector", '[data-field="requests"]')
            assert requests.is_displayed() and requests.text == str(CHATS)
            tokens = row.find_element("css selector", '[data-field="tokens"]').text
            assert tokens == f"{app['usage_prompt_tokens']} / {app['usage_completion_tokens']}"
            saved.append(_screenshot(driver, shots, "keys", width))

            driver.get(live.base + f"/ui/prompts/{seeded.prompt}")
            assert driver.execute_script(
                "return document.documentElement.scrollWidth <= window.innerWidth"
            )
            where = _checkbox_beside_label(driver)
            assert where["labelled"] and where["text"].startswith("Calibrated"), where
            assert where["lineTop"] <= where["boxMiddle"] <= where["lineBottom"], where
            assert 0 <= where["gap"] <= 16, where  # beside it, to its left
            assert _broken_ids(driver, "dl.meta") == [], width  # the details list's IDs
            assert _broken_ids(driver, ".crumbs") == [], width
            named = by_id(driver, "prompt-validation-dataset")
            assert named.text == "held-out tickets"
            assert named.get_attribute("href").endswith(f"/ui/datasets/{seeded.validation}")
            saved.append(_screenshot(driver, shots, "prompt", width))

            driver.get(live.base + f"/ui/jobs/{seeded.job}")
            assert driver.execute_script(
                "return document.documentElement.scrollWidth <= window.innerWidth"
            )
            assert _broken_ids(driver, "dl.meta") == [], width
            assert _broken_ids(driver, ".crumbs") == [], width
            submitter = by_id(driver, "job-submitter-key")
            assert submitter.text == "ops laptop"
            assert submitter.get_attribute("href").endswith(f"/ui/keys#key-{seeded.ops_key}")
            assert by_id(driver, "job-validation-dataset").text == "held-out tickets"
            assert MARKER not in driver.page_source and VALID not in driver.page_source
        for width in (320, 480, 601, 700, 800, 1000):  # other widths: never a sideways page
            _width(driver, width)
            for path in ("/ui/jobs", "/ui/prompts", "/ui/keys", f"/ui/prompts/{seeded.prompt}"):
                driver.get(live.base + path)
                assert driver.execute_script(
                    "return document.documentElement.scrollWidth <= window.innerWidth"
                ), (
                    width,
                    path,
                    driver.execute_script("return document.documentElement.scrollWidth"),
                )
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    from PIL import Image

    for path in saved:
        with Image.open(path) as image:
            assert image.width == (NARROW if "-360" in path.name else WIDE), path
