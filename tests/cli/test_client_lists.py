"""The client's list/show/delete commands (datasets, jobs, prompts, keys), its errors in CLI
words (options and commands, never request fields or routes), a ``--url`` ending in ``/v1``,
``dpsyn serve`` on a busy port, and a soft prompt's ``prompts get``; against the live test
server of ``conftest.py``."""

from __future__ import annotations

import json
import re
import socket
import time
from typing import Any

import httpx
import pytest

from app.cli import app as cli
from app.db.models import PromptSet
from app.db.session import session_scope
from tests.cli.live_server import FAST, KEY, SECRET, runner, upload


def _json(result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _api(server: str, path: str, key: str = KEY) -> Any:
    response = httpx.get(server + path, headers={"Authorization": f"Bearer {key}"})
    response.raise_for_status()
    return response.json()


def _finished_job(dpsyn, dataset: str, epsilon: str = "2") -> tuple[str, str]:
    """Submit and wait for a job; its ID and its prompt's."""
    result = dpsyn(
        "jobs", "submit", "--dataset", dataset, "--epsilon", epsilon, *FAST, "--wait",
        "--poll", "0.1", "--json",
    )  # fmt: skip
    job = _json(result)
    assert job["status"] == "succeeded", job
    return job["id"], job["prompt_id"]


def test_datasets_show_and_delete_asks_first(dpsyn, server, trec_file):
    dataset = upload(dpsyn, trec_file)
    shown = dpsyn("datasets", "show", dataset)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.startswith(f"dataset {dataset} 'trec': 120 records, task trec (")
    assert _json(dpsyn("datasets", "show", dataset, "--json")) == _api(
        server, f"/v1/datasets/{dataset}"
    )

    refused = dpsyn("datasets", "delete", dataset, input="n\n")
    assert refused.exit_code == 1, refused.output
    assert "Delete the 120 records of dataset" in refused.stderr
    assert "error: nothing changed (answer y, or pass --yes)" in refused.stderr
    no_answer = dpsyn("datasets", "delete", dataset)  # no terminal, nothing on stdin
    assert no_answer.exit_code == 1 and "nothing changed" in no_answer.stderr
    assert _api(server, f"/v1/datasets/{dataset}")["deleted_at"] is None

    deleted = dpsyn("datasets", "delete", dataset, input="y\n")
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout.endswith(f"deleted the records of dataset {dataset} 'trec'\n")
    assert _api(server, f"/v1/datasets/{dataset}")["deleted_at"] is not None
    assert "records deleted " in dpsyn("datasets", "show", dataset).stdout
    again = dpsyn("datasets", "delete", dataset, "--yes")
    assert again.exit_code == 0 and "already deleted; nothing changed" in again.stdout

    other = upload(dpsyn, trec_file)
    body = _json(dpsyn("datasets", "delete", other, "--yes", "--json"))
    assert body["id"] == other and body["deleted_at"] is not None
    for result in (shown, refused, deleted):
        assert SECRET not in result.output


def test_jobs_list_filters_by_dataset_and_status(dpsyn, server, trec_file):
    first, second = upload(dpsyn, trec_file), upload(dpsyn, trec_file)
    for dataset in (first, second):
        assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    job_a, prompt_a = _finished_job(dpsyn, first)
    job_b, _ = _finished_job(dpsyn, second)

    listed = dpsyn("jobs", "list")
    assert listed.exit_code == 0, listed.output
    header, *rows = listed.stdout.splitlines()
    assert header.split()[:4] == ["id", "status", "method", "epsilon"]
    assert [row.split()[0] for row in rows] == [job_b, job_a]  # newest first
    assert f"{job_a}  succeeded  adadpsyn" in listed.stdout and prompt_a in listed.stdout

    only_first = _json(dpsyn("jobs", "list", "--dataset", first, "--json"))
    assert [job["id"] for job in only_first] == [job_a]
    assert only_first == _api(server, f"/v1/jobs?dataset_id={first}")
    assert _json(dpsyn("jobs", "list", "--status", "queued", "--json")) == []
    succeeded = dpsyn("jobs", "list", "--status", "succeeded", "--limit", "1")
    assert len(succeeded.stdout.splitlines()) == 2 and job_b in succeeded.stdout
    bad = dpsyn("jobs", "list", "--status", "done")
    assert bad.exit_code == 2 and "--status" in bad.output
    assert SECRET not in listed.output + succeeded.output


def test_prompts_list_shows_method_and_dataset_name(dpsyn, server, trec_file):
    dataset = upload(dpsyn, trec_file)
    dpsyn("budget", "set", dataset, "--epsilon", "10")
    job, prompt = _finished_job(dpsyn, dataset)
    listed = dpsyn("prompts", "list")
    assert listed.exit_code == 0, listed.output
    header, row = listed.stdout.splitlines()
    assert header.split()[:3] == ["id", "method", "dataset"]
    assert row.startswith(f"{prompt}  adadpsyn  trec ({dataset})  trec  ")
    assert row.split()[-2] == job and " text " in row
    assert _json(dpsyn("prompts", "list", "--json")) == _api(server, "/v1/prompts")
    assert _json(dpsyn("prompts", "list", "--dataset", "other", "--json")) == []
    assert SECRET not in listed.output


@pytest.mark.parametrize(
    ("accuracy", "mark", "said"),
    [
        (0.292, "behind", "is behind zero-shot"),
        (0.396, "cannot tell", "cannot tell on 48 records: behind zero-shot"),
        (0.5, "cannot tell", "cannot tell on 48 records: ahead of zero-shot"),
        (0.9, "ahead", "beats zero-shot and the majority label"),
    ],
)
def test_prompts_list_marks_every_score_by_its_verdict(
    dpsyn, trec_file, sqlite_url, accuracy, mark, said
):
    """Issue 55: 0.292 against zero-shot's 0.458 on 48 records printed unmarked (its boolean
    was the plain comparison with zero-shot only, and only false was marked)."""
    dataset = upload(dpsyn, trec_file)
    dpsyn("budget", "set", dataset, "--epsilon", "10")
    _, prompt_id = _finished_job(dpsyn, dataset)
    baselines = {"zero_shot": 0.458, "majority": 0.25, "majority_label": "location"}
    with session_scope(sqlite_url) as session:
        row = session.get(PromptSet, prompt_id)
        assert row is not None
        row.validation = {"dataset_id": dataset, "status": "scored", "n": 48,
                          "accuracy": accuracy, "baselines": baselines}  # fmt: skip
    listed = dpsyn("prompts", "list")
    assert listed.exit_code == 0, listed.output
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith(prompt_id)]
    assert f"  {accuracy:.3f} {mark}  " in line
    assert f"this prompt {said}" in dpsyn("prompts", "get", prompt_id).stdout  # as the list
    help_text = dpsyn("prompts", "list", "--help").stdout
    assert "marked ahead, behind or cannot tell" in " ".join(help_text.split())


def test_keys_create_list_and_revoke_for_the_own_tenant(dpsyn, server, trec_file):
    created = dpsyn("keys", "create")
    assert created.exit_code == 0, created.output
    raw = created.stdout.strip()
    assert created.stdout == raw + "\n"  # the key alone on stdout
    assert created.stderr.startswith("created a prompts:read key ")
    key_id = created.stderr.split()[4]

    listed = dpsyn("keys", "list")
    assert listed.stdout.splitlines()[0].split() == [
        "ID", "NAME", "SCOPE", "STATUS", "CREATED", "LAST", "USED", "REQUESTS", "TOKENS", "IN/OUT",
    ]  # fmt: skip
    assert re.search(rf"{key_id}\s+-\s+prompts:read\s+live\s+\S+\s+never\s+0\s+0/0", listed.stdout)
    assert _json(dpsyn("keys", "list", "--json")) == _api(server, "/v1/keys")

    # A prompts:read key lists prompts (and their datasets' names).
    dataset = upload(dpsyn, trec_file)
    dpsyn("budget", "set", dataset, "--epsilon", "10")
    _, prompt = _finished_job(dpsyn, dataset)
    reader = dpsyn("prompts", "list", "--key", raw)
    assert reader.exit_code == 0, reader.output
    assert f"{prompt}  adadpsyn  trec ({dataset})  trec" in reader.stdout
    assert dpsyn("keys", "list", "--key", raw).exit_code == 1  # admin keys only

    kept = dpsyn("keys", "revoke", key_id, input="n\n")
    assert kept.exit_code == 1 and "nothing changed" in kept.stderr
    assert dpsyn("prompts", "list", "--key", raw).exit_code == 0
    revoked = dpsyn("keys", "revoke", key_id, "--yes")
    assert revoked.exit_code == 0 and f"revoked key {key_id}" in revoked.stderr
    refused = dpsyn("prompts", "list", "--key", raw)
    assert refused.exit_code == 1 and "invalid or revoked API key" in refused.stderr
    assert re.search(rf"{key_id}\s+-\s+prompts:read\s+revoked", dpsyn("keys", "list").stdout)
    # Used since: its last use is listed (written in the background, the uses of a second
    # together; at most once a minute).
    deadline = time.monotonic() + 5
    while next(r for r in _api(server, "/v1/keys") if r["id"] == key_id)["last_used_at"] is None:
        assert time.monotonic() < deadline, "the key's last use was never written"
        time.sleep(0.05)

    admin = _json(dpsyn("keys", "create", "--scope", "admin", "--json"))
    assert admin["scope"] == "admin" and admin["key"]
    named = dpsyn("keys", "create", "--name", "  nightly report  ")
    assert named.exit_code == 0, named.output
    assert "created a prompts:read key 'nightly report' " in named.stderr
    assert re.search(r"\s+nightly report\s+prompts:read\s+live", dpsyn("keys", "list").stdout)
    blank = dpsyn("keys", "create", "--name", "   ")
    assert blank.exit_code == 1 and "name" in blank.stderr and "blank" in blank.stderr
    org = dpsyn("keys", "create", "--scope", "org:read")
    assert org.exit_code == 1 and "only the operator" in org.stderr
    missing = dpsyn("keys", "revoke", "nope", "--yes")
    assert missing.exit_code == 1 and "API key 'nope' not found" in missing.stderr


def test_server_errors_name_commands_and_options(dpsyn, trec_file):
    """Issue 24: no route and no request field in what the CLI prints."""
    dataset = upload(dpsyn, trec_file)
    no_budget = dpsyn("jobs", "submit", "--dataset", dataset, "--epsilon", "1", *FAST)
    assert no_budget.exit_code == 1
    assert f"set one with 'dpsyn budget set {dataset} --epsilon TOTAL'" in no_budget.stderr
    assert "/v1/" not in no_budget.stderr and "(no_budget, HTTP 409)" in no_budget.stderr

    dpsyn("budget", "set", dataset, "--epsilon", "5")
    no_public = dpsyn(
        "jobs", "submit", "--dataset", dataset, "--method", "promptpate", "--epsilon", "3"
    )  # fmt: skip
    assert no_public.exit_code == 1
    assert no_public.stderr.startswith("error: --public-dataset: required for method promptpate")
    assert "public_dataset_id" not in no_public.stderr

    bad_epsilon = dpsyn("budget", "set", dataset, "--epsilon", "-1")
    assert bad_epsilon.exit_code == 1 and bad_epsilon.stderr.startswith("error: --epsilon: ")


def test_a_url_ending_in_v1_is_corrected_and_one_with_a_path_explained(dpsyn, server):
    fixed = dpsyn("datasets", "list", "--url", server + "/v1/")
    assert fixed.exit_code == 0, fixed.output
    assert f"note: using {server}: the server URL is given without /v1" in fixed.stderr
    wrong = dpsyn("datasets", "list", "--url", server + "/api")
    assert wrong.exit_code == 1
    assert "has no route GET /api/v1/datasets (HTTP 404)" in wrong.stderr
    assert "--url (DPSYN_URL) must be the dpsyn server's base URL" in wrong.stderr


def test_serve_on_a_busy_port_fails_before_migrating(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("DPSYN_DATABASE_URL", "DPSYN_BROKER_URL", "DPSYN_BOOTSTRAP_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = runner.invoke(cli, ["serve", "--host", "127.0.0.1", "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert f"error: port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "--port" in result.stderr and "Errno" not in result.stderr
    assert not (tmp_path / ".dpsyn" / "dpsyn.db").exists()  # no migration ran
    assert not (tmp_path / ".dpsyn" / "admin_key").exists()


def test_a_soft_prompt_prints_no_empty_prompt_block(dpsyn, trec_file, sqlite_url):
    """A PromptDPSGD prompt has no text (its stored prompt is empty): ``prompts get`` says
    what it is and how to use it instead of an empty "--- prompt ---" block."""
    import numpy as np

    from app.promptdpsgd.artifact import SoftPrompt
    from app.services.jobs import attach_soft_prompt

    dataset = upload(dpsyn, trec_file)
    dpsyn("budget", "set", dataset, "--epsilon", "10")
    _, prompt_id = _finished_job(dpsyn, dataset)
    soft = SoftPrompt("fake", np.random.default_rng(5).normal(size=(2, 4)))
    with session_scope(sqlite_url) as session:
        row = session.get(PromptSet, prompt_id)
        assert row is not None
        attach_soft_prompt(row, soft)
        row.prompt, row.demonstrations = "", []
    shown = dpsyn("prompts", "get", prompt_id)
    assert shown.exit_code == 0, shown.output
    assert "--- prompt ---" not in shown.stdout
    assert "(no text prompt: this is a soft prompt, 2 trained vectors" in shown.stdout
    assert f"'dpsyn prompts complete {prompt_id} --query TEXT'" in shown.stdout
    assert f"dpsyn prompts download {prompt_id}" in shown.stdout


@pytest.mark.parametrize(("shots", "expected"), [("2", "2 shots cover 2 of 6 labels"),
                                                 ("6", "6 shots cover all 6 labels")])  # fmt: skip
def test_submit_says_how_many_labels_the_shots_cover(dpsyn, trec_file, shots, expected):
    dataset = upload(dpsyn, trec_file)
    dpsyn("budget", "set", dataset, "--epsilon", "10")
    submitted = dpsyn("jobs", "submit", "--dataset", dataset, "--epsilon", "2", *FAST[:-2],
                      "--shots", shots)  # fmt: skip
    assert submitted.exit_code == 0, submitted.output
    assert expected in submitted.stderr
    assert ("pass --shots 6 for a demonstration of every label" in submitted.stderr) == (
        shots == "2"
    )


def test_budget_ledger_all_tenants_prints_the_fleet_csv_and_one_teams(dpsyn, trec_file, sqlite_url):
    """Issue 43: no CLI for the fleet CSV, and no one-team export for a privacy officer."""
    import time as _time

    from app.db.models import KeyScope
    from app.db.session import session_scope
    from app.services.tenants import create_key_for, create_tenant

    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    with session_scope(sqlite_url) as session:
        tenant, _ = create_tenant(session, f"org-{_time.monotonic_ns()}")
        _, org = create_key_for(session, tenant, KeyScope.ORG_READ, "officer")
    whole = dpsyn("budget", "ledger", "--all-tenants", "--key", org)
    assert whole.exit_code == 0, whole.output
    assert whole.output.startswith("tenant_id,tenant_name,dataset_id")
    team = dpsyn("budget", "ledger", "--all-tenants", "--tenant", "default", "--key", org)
    assert team.exit_code == 0 and team.output.startswith("tenant_id,")
    assert dpsyn("budget", "ledger", "--all-tenants", "--tenant", "nobody", "--key", org).exit_code
    own = dpsyn("budget", "ledger", "--all-tenants")  # a tenant's admin key
    assert own.exit_code == 1 and "org:read" in own.output
