"""A prompt's notes end to end (issue 33): a live server whose model's stop token wins every
first step, and whose only other candidates for TREC's "Location" are words of whitespace, so
that label's one demonstration comes out empty and is left out. The prompt's API record,
``dpsyn prompts get`` and the dashboard's prompt page all say so; a normal prompt has no
notes."""

from __future__ import annotations

import html
import re

import httpx
import pytest

from app.methods.token_loop import NOT_REGENERATED
from tests.cli.live_server import KEY, upload
from tests.synthesis.fake_backend import BlankLabelBackend, FakeBackend
from tests.ui.test_pages import sign_in

SMALL = ["--M", "4", "--N", "2", "--tmax", "4", "--K", "10"]
# --min-words 1: only the blank demonstration is left out (the fake writes one-word ones)
ONE_WORD = ("--min-words", "1")
LEFT_OUT = (
    "1 demonstration of label 'Location' came out empty (only whitespace after T_max tokens) "
    "and was left out; the prompt holds 5 of the 6 planned."
)
UNDEMONSTRATED = (
    "The prompt does not demonstrate label 'Location': every demonstration planned for it came "
    "out empty."
)


def _prompt_of_a_job(dpsyn, trec_file, shots: int, *params: str) -> str:
    """Upload, fund and run a tang job of ``shots`` demonstrations; its prompt's ID."""
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    submitted = dpsyn(
        "jobs", "submit", "--dataset", dataset, "--method", "tang", "--epsilon", "8",
        *SMALL, *(params or ONE_WORD), "--shots", str(shots), "--wait", "--poll", "0.1", "-q",
    )  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    return submitted.output.strip().splitlines()[-1]


COST = NOT_REGENERATED.format(planned=6)


def _served(server: str, prompt_id: str) -> tuple[dict, str]:
    """The prompt's API record and its dashboard page's notes (text; "" when none)."""
    with httpx.Client(base_url=server) as client:
        record = client.get(f"/v1/prompts/{prompt_id}", headers={"Authorization": f"Bearer {KEY}"})
        assert record.status_code == 200, record.text
        sign_in(client, KEY)  # written for a TestClient; an httpx client has its interface
        page = client.get(f"/ui/prompts/{prompt_id}")
        assert page.status_code == 200, page.text
    found = re.search(r'<div class="notice" id="prompt-notes">(.*?)</div>', page.text, re.S)
    notes = html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))) if found else ""
    return record.json(), " ".join(notes.split())


@pytest.mark.parametrize("fake_backend", [BlankLabelBackend("location")])
def test_a_demonstration_left_out_empty_is_noted_everywhere_the_prompt_is_shown(
    dpsyn, trec_file, server
):
    prompt_id = _prompt_of_a_job(dpsyn, trec_file, shots=6)
    record, page_notes = _served(server, prompt_id)
    assert record["notes"] == [LEFT_OUT, UNDEMONSTRATED, COST]
    labels = sorted(d["label"] for d in record["demonstrations"])
    assert labels == ["Abbreviation", "Description", "Entity", "Number", "Person"]
    assert all(d["text"].strip() for d in record["demonstrations"])
    assert page_notes == f"{LEFT_OUT} {UNDEMONSTRATED} {COST}"

    shown = dpsyn("prompts", "get", prompt_id)
    assert shown.exit_code == 0, shown.output
    assert f"note: {LEFT_OUT}\nnote: {UNDEMONSTRATED}\nnote: {COST}\n" in shown.output
    assert "[5] Answer Type:" in shown.output and "[6]" not in shown.output
    as_json = dpsyn("prompts", "get", prompt_id, "--json")
    assert '"notes": [' in as_json.output and LEFT_OUT in as_json.output

    job = dpsyn("jobs", "list", "--json")  # the job's own record counts it too
    assert '"empty_demonstrations": 1' in job.output


@pytest.mark.parametrize("fake_backend", [FakeBackend()])
def test_a_prompt_with_every_planned_demonstration_has_no_notes(dpsyn, trec_file, server):
    prompt_id = _prompt_of_a_job(dpsyn, trec_file, shots=6)
    record, page_notes = _served(server, prompt_id)
    assert record["notes"] == [] and len(record["demonstrations"]) == 6
    assert page_notes == ""
    shown = dpsyn("prompts", "get", prompt_id)
    assert shown.exit_code == 0 and "note:" not in shown.output, shown.output


@pytest.mark.parametrize("fake_backend", [FakeBackend()])
def test_a_job_that_serves_fewer_demonstrations_than_asked_says_so_in_the_cli(
    dpsyn, trec_file, server
):
    """Issue 55.8: every demonstration fails the text checks (the fake writes at most tmax (4)
    words, fewer than --min-words 50): ``jobs show`` and ``jobs wait`` say how many the prompt
    serves of those asked for, why, and that all were charged; ``prompts get`` notes it."""
    prompt_id = _prompt_of_a_job(dpsyn, trec_file, 6, "--min-words", "50")
    record, _ = _served(server, prompt_id)
    assert record["demonstrations_served"] == 0 and record["demonstrations_requested"] == 6
    job_id = record["job_id"]
    said = "serves 0 of the 6 demonstrations asked for (6 came out shorter than 50 words: left out)"
    for command in ("show", "wait"):
        shown = dpsyn("jobs", command, job_id)
        assert shown.exit_code == 0, shown.output
        assert said in " ".join(shown.output.split()), shown.output
        assert "the privacy cost is that of all 6" in " ".join(shown.output.split())
    got = dpsyn("prompts", "get", prompt_id)
    assert f"note: {COST}" in got.output
