"""Issue 32 in the client commands, against a live server: the owner's declaration that a
dataset's label counts are public (``datasets upload --public-counts``, ``datasets
counts-public``), shown by ``datasets show|list`` and ``jobs show``; paper accounting refused
without it, in the CLI's words; and ``budget show|set`` explaining the delta and warning."""

from __future__ import annotations

import json

from tests.cli.live_server import FAST, SECRET, upload


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_declaration_at_upload_and_later(dpsyn, trec_file):
    declared = dpsyn("datasets", "upload", str(trec_file), "--task", "trec", "--public-counts")
    assert declared.exit_code == 0, declared.output
    assert "counts declared public" in declared.output
    dataset = _json(dpsyn("datasets", "list", "--json"))[0]["id"]
    shown = dpsyn("datasets", "show", dataset)
    assert "label counts: declared public (" in shown.output and " by key " in shown.output
    listed = dpsyn("datasets", "list")
    assert "counts" in listed.output.splitlines()[0] and "public" in listed.output

    withdrawn = dpsyn("datasets", "counts-public", dataset, "--withdraw")
    assert withdrawn.exit_code == 0, withdrawn.output
    assert "label counts: private (declaration withdrawn" in withdrawn.output
    # Declaring asks first (a prompt's readers may then learn the counts).
    unanswered = dpsyn("datasets", "counts-public", dataset, input="n\n")
    assert unanswered.exit_code == 1 and "nothing changed" in unanswered.output
    assert _json(dpsyn("datasets", "show", dataset, "--json"))["counts_public"] is False
    again = dpsyn("datasets", "counts-public", dataset, "--yes")
    assert again.exit_code == 0 and "label counts: declared public" in again.output

    refused = dpsyn(
        "datasets", "upload", str(trec_file), "--public", "--public-counts"
    )  # fmt: skip
    assert refused.exit_code == 2 and "--public-counts: only for a private dataset" in (
        refused.output
    )


def test_paper_accounting_names_the_declaration_and_jobs_say_what_they_used(dpsyn, trec_file):
    dataset = upload(dpsyn, trec_file)
    shown = dpsyn("datasets", "show", dataset)
    assert "label counts: private: each job releases" in shown.output
    budget = dpsyn("budget", "set", dataset, "--epsilon", "10", "--accounting", "paper")
    assert budget.exit_code == 0, budget.output
    command = f"'dpsyn datasets counts-public {dataset}'"
    assert "warning: paper accounting" in budget.output and command in budget.output
    refused = dpsyn("jobs", "submit", "--dataset", dataset, "--epsilon", "8", *FAST)
    assert refused.exit_code == 1
    assert len(refused.output.strip().splitlines()) == 1  # one line, in the CLI's words
    assert command in refused.output and "PUT /v1" not in refused.output

    assert dpsyn("datasets", "counts-public", dataset, "--yes").exit_code == 0
    job = _json(
        dpsyn("jobs", "submit", "--dataset", dataset, "--epsilon", "8", *FAST, "--json")
    )  # fmt: skip
    shown_job = dpsyn("jobs", "show", job["id"])
    assert "label counts: declared public by the dataset's owner" in shown_job.output
    for result in (shown, budget, refused, shown_job):
        assert SECRET not in result.output


def test_budget_explains_its_delta_and_warns_above_one_over_the_size(dpsyn, trec_file):
    dataset = upload(dpsyn, trec_file)  # 120 records
    budget = dpsyn("budget", "set", dataset, "--epsilon", "10")
    assert "delta 1e-6: the public default, chosen independent of the dataset" in budget.output
    assert "warning" not in budget.output
    job = _json(
        dpsyn("jobs", "submit", "--dataset", dataset, "--epsilon", "8", *FAST, "--json")
    )  # fmt: skip
    shown = dpsyn("jobs", "show", job["id"]).output
    assert "label counts: planned with the dataset's count release (released once under DP" in (
        shown
    )

    high = dpsyn("budget", "set", dataset, "--epsilon", "10", "--delta", "0.05")
    assert high.exit_code == 0, high.output
    assert "delta 0.05: set by the owner" in high.output
    assert "warning: delta 0.05 is above 1/|D|" in high.output
    shown = dpsyn("budget", "show", dataset)
    assert "set by the owner" in shown.output and "above 1/|D|" in shown.output
