"""Issue 41 in the client: the dataset's count release is its own line in ``budget show``
and its own column in ``budget list``; ``jobs quote`` and ``jobs show`` print each label's
noise; three quotes and the job they admit carry the same epsilon."""

from __future__ import annotations

import json

import httpx

from app.privacy.budget import spend_text
from tests.cli.live_server import FAST, KEY, SECRET, upload


def _budget(server: str, dataset: str) -> dict:
    response = httpx.get(
        f"{server}/v1/datasets/{dataset}/budget",
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_budget_show_and_list_give_the_count_release_its_own_line(dpsyn, server, trec_file):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "8").exit_code == 0
    before = dpsyn("budget", "show", dataset)
    assert before.exit_code == 0 and "count release" not in before.output  # none drawn yet

    quote = dpsyn("jobs", "quote", "--dataset", dataset, "--method", "tang", "--epsilon", "1",
                  *FAST)  # fmt: skip
    assert quote.exit_code == 0, quote.output
    [release] = _budget(server, dataset)["count_releases"]
    shown = dpsyn("budget", "show", dataset)
    assert shown.exit_code == 0, shown.output
    line = next(x for x in shown.stdout.splitlines() if x.startswith("count release:"))
    assert line.startswith(f"count release: epsilon {spend_text(release['epsilon'])} (5% of the ")
    assert "once for this dataset" in line and f"sigma {release['sigma']:.4g}" in line
    ledger = [x for x in shown.stdout.splitlines() if " counts " in x]
    assert len(ledger) == 1 and f"count release {release['id']}" in ledger[0]

    listed = dpsyn("budget", "list")
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    assert "count release" in header
    [row] = [r for r in rows if r.startswith(dataset)]
    assert spend_text(release["epsilon"]) in row.split()
    assert "charged once for the dataset" in listed.stderr
    assert SECRET not in shown.output + listed.output + quote.output


def test_quotes_and_the_job_agree_and_show_each_labels_noise(dpsyn, server, trec_file):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "8").exit_code == 0
    asked = ["--dataset", dataset, "--method", "tang", "--epsilon", "1", *FAST]
    quotes = [json.loads(dpsyn("jobs", "quote", *asked, "--json").stdout) for _ in range(3)]
    submitted = dpsyn("jobs", "submit", *asked, "--json")
    assert submitted.exit_code == 0, submitted.output
    job = json.loads(submitted.stdout)
    assert {q["epsilon"] for q in quotes} == {job["epsilon"]}
    assert all(q["noise"] == job["noise"] for q in quotes) and len(job["noise"]) == 2  # 2 shots

    shown = dpsyn("jobs", "show", job["id"])
    assert shown.exit_code == 0, shown.output
    noise = ", ".join(f"{label} {sigma:.4g}" for label, sigma in job["noise"].items())
    assert f"noise sigma per label: {noise}" in shown.stdout
    assert "planned with the dataset's count release" in shown.stdout
    assert len(_budget(server, dataset)["count_releases"]) == 1
