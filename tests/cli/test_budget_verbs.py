"""Issue 34's CLI verbs against the live test server: ``budget list``, ``budget ledger
[--csv]``, ``jobs quote`` (the dashboard's "Check the cost"), thresholds in percent, spends
rounded the way their percent is, and method parameters spelled as ``synthesize`` spells
them (``--teacher-shots``)."""

from __future__ import annotations

import csv
import io
import json
import re
import uuid

import httpx
import pytest

from app.db.models import KeyScope
from app.db.session import session_scope
from app.methods.registry import find_method, validate_params
from app.privacy.budget import budget_percent, spend_text
from app.services.tenants import create_key_for, create_tenant
from tests.cli.live_server import FAST, KEY, SECRET, upload


def _api(server: str, method: str, path: str, **kwargs) -> httpx.Response:
    headers = {"Authorization": f"Bearer {KEY}"}
    return httpx.request(method, server + path, headers=headers, timeout=60, **kwargs)


def _submit(dpsyn, dataset: str, epsilon: str) -> None:
    result = dpsyn(
        "jobs", "submit", "--dataset", dataset, "--method", "tang", "--epsilon", epsilon,
        *FAST, "--wait", "--poll", "0.1", "-q",
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def test_budget_list_shows_each_budget_and_filters_those_past_their_threshold(dpsyn, trec_file):
    calm, busy, unbudgeted = (upload(dpsyn, trec_file) for _ in range(3))
    assert dpsyn("budget", "set", calm, "--epsilon", "10", "--warn", "90").exit_code == 0
    assert dpsyn("budget", "set", busy, "--epsilon", "4", "--warn", "50").exit_code == 0
    _submit(dpsyn, busy, "3")

    listed = dpsyn("budget", "list")
    assert listed.exit_code == 0, listed.output
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert set(lines) == {calm, busy}  # a dataset without a budget is not a budget
    assert "90%" in lines[calm] and " ok" in lines[calm]
    assert "50%" in lines[busy] and " warn" in lines[busy]

    over = dpsyn("budget", "list", "--over-threshold", "--json")
    assert over.exit_code == 0, over.output
    assert [row["dataset_id"] for row in json.loads(over.stdout)] == [busy]
    assert unbudgeted not in listed.stdout and SECRET not in listed.output


def test_budget_ledger_prints_the_entries_and_the_same_csv_as_the_api(dpsyn, server, trec_file):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    empty = dpsyn("budget", "ledger", dataset)
    assert empty.exit_code == 0 and "is empty" in empty.stdout
    _submit(dpsyn, dataset, "2")

    table = dpsyn("budget", "ledger", dataset)
    assert table.exit_code == 0, table.output
    kinds = [line.split()[1] for line in table.stdout.splitlines()[1:]]
    assert kinds == ["counts", "reserve", "commit"]  # the dataset's count release first
    release = _api(server, "GET", f"/v1/datasets/{dataset}/budget").json()["count_releases"]
    assert f"count release {release[0]['id']}" in table.stdout  # named as what it is

    exported = dpsyn("budget", "ledger", dataset, "--csv")
    assert exported.exit_code == 0, exported.output
    direct = _api(server, "GET", f"/v1/datasets/{dataset}/budget/ledger.csv")
    assert exported.stdout_bytes == direct.content
    rows = list(csv.DictReader(io.StringIO(direct.text)))
    assert [row["kind"] for row in rows] == ["counts", "reserve", "commit"]

    missing = dpsyn("budget", "ledger", "nope", "--csv")
    assert missing.exit_code == 1 and "not found" in missing.output


def test_jobs_quote_reserves_nothing_and_says_what_submit_would_charge(dpsyn, server, trec_file):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "5").exit_code == 0
    _submit(dpsyn, dataset, "2")
    before = _api(server, "GET", f"/v1/datasets/{dataset}/budget").json()

    quote = json.loads(
        dpsyn(
            "jobs", "quote", "--dataset", dataset, "--method", "tang", "--epsilon", "2",
            *FAST, "--json",
        ).stdout
    )  # fmt: skip
    after = _api(server, "GET", f"/v1/datasets/{dataset}/budget").json()
    assert after["history"] == before["history"]  # nothing reserved
    assert quote["spent"] == pytest.approx(before["spent"])
    assert quote["epsilon"] == pytest.approx(2, rel=0.01)
    # Composed, the second job adds less than its own epsilon (nothing at all when it charges
    # only label groups other than the binding one); a plain sum adds all of it.
    assert quote["spent"] <= quote["spent_after"] < quote["spent"] + quote["epsilon"]
    charged = [group for group in quote["groups"] if group["charged"]]
    assert charged and all(g["after"] > g["before"] for g in charged)
    binding = max(quote["groups"], key=lambda group: group["after"])
    assert binding["binding_after"] and binding["after"] == pytest.approx(quote["spent_after"])
    assert quote["plain_sum_after"] == pytest.approx(before["plain_sum"] + quote["epsilon"])
    assert quote["fits"] is True

    words = dpsyn(
        "jobs", "quote", "--dataset", dataset, "--method", "tang", "--epsilon", "2", *FAST
    )
    assert words.exit_code == 0, words.output
    said = re.search(r"spent ([\d.]+) of 5 now, ([\d.]+) \((\d+)%\) if admitted", words.stdout)
    assert said, words.stdout
    assert float(said[1]) == pytest.approx(quote["spent"], abs=1e-3)
    # The JSON quote's, to its 4 digits rounded down: the same request plans the same job
    # (issue 41: both plans read the dataset's one count release, and a public schedule).
    assert float(said[2]) == float(spend_text(quote["spent_after"]))
    assert budget_percent(float(said[2]) / 5) == f"{said[3]}%"  # the words agree
    assert "fits:" in words.stdout
    # The count release's own line, and each label's noise.
    assert (
        f"of which the dataset's count release: epsilon {spend_text(quote['counts_epsilon'])}"
        in (words.stdout)
    )
    noise = ", ".join(f"{label} {sigma:.4g}" for label, sigma in quote["noise"].items())
    assert quote["noise"] and f"noise sigma per label: {noise}" in words.stdout

    too_much = dpsyn("jobs", "quote", "--dataset", dataset, "--method", "tang", "--epsilon", "9",
                     *FAST)  # fmt: skip
    assert too_much.exit_code == 1 and "budget_exceeded" in too_much.output  # as submit says
    assert SECRET not in words.output + too_much.output


def test_spend_is_rounded_down_like_its_percent():
    # Issue 34: "spent 8 (79%, ok)": the spend rounded up beside a percent rounded down.
    assert spend_text(7.9996) == "7.999" and budget_percent(7.9996 / 10) == "79%"
    assert spend_text(5.2118) == "5.211" and spend_text(2.0) == "2"
    assert spend_text(0.000123456) == "0.0001234"


def test_a_parameter_goes_by_its_command_line_spelling_too():
    pate = find_method("promptpate")
    assert pate is not None
    assert validate_params(pate, {"teacher_shots": 2}) == validate_params(pate, {"shots": 2})
    assert validate_params(pate, {"teacher_shots": 2})["shots"] == 2
    with pytest.raises(ValueError, match="teacher_shots and shots are the same parameter"):
        validate_params(pate, {"teacher_shots": 2, "shots": 3})


def test_jobs_submit_takes_teacher_shots_as_synthesize_does(dpsyn, server, trec_file):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "5").exit_code == 0
    # The quote plans the job exactly as submit does: a 422 on the parameter would show here.
    quoted = dpsyn(
        "jobs", "quote", "--dataset", dataset, "--method", "promptpate", "--epsilon", "1",
        "--teacher-shots", "2", "--json",
    )  # fmt: skip
    assert "teacher_shots" not in quoted.output, quoted.output
    assert "not a parameter" not in quoted.output
    doubled = dpsyn(
        "jobs", "quote", "--dataset", dataset, "--method", "promptpate", "--epsilon", "1",
        "--teacher-shots", "2", "--param", "shots=3",
    )  # fmt: skip
    assert doubled.exit_code == 1 and "the same parameter" in doubled.output


def test_a_url_without_a_scheme_or_with_https_against_http_says_what_to_do(dpsyn, server):
    bare = server.removeprefix("http://")  # 127.0.0.1:PORT, as a user types it
    listed = dpsyn("datasets", "list", "--url", bare)
    assert listed.exit_code == 0, listed.output
    assert f"note: using {server}: a server URL without a scheme is taken as http://" in (
        listed.stderr
    )
    secure = "https://" + bare
    refused = dpsyn("datasets", "list", "--url", secure)
    assert refused.exit_code == 1
    assert f"the dpsyn server at {secure} did not answer HTTPS" in refused.output
    assert f"use --url {server}" in refused.output and "is 'dpsyn serve' running" not in (
        refused.output
    )


def _validation_set(dpsyn, tmp_path) -> str:
    """Upload a small public labelled TREC set (a validation set); its ID."""
    path = tmp_path / "dev.txt"
    codes = ["NUM", "LOC", "HUM", "DESC", "ENTY", "ABBR"] * 3
    path.write_text(
        "".join(f"{code}:x Question {i} about things ?\n" for i, code in enumerate(codes))
    )
    made = dpsyn("datasets", "upload", str(path), "--task", "trec", "--public", "--labelled", "-q")
    assert made.exit_code == 0, made.output
    return made.stdout.strip()


def test_a_validation_set_given_as_the_private_dataset_is_named_as_one(dpsyn, tmp_path):
    refused = dpsyn(
        "jobs", "submit", "--dataset", _validation_set(dpsyn, tmp_path), "--epsilon", "1"
    )
    assert refused.exit_code == 1
    assert "is public and labelled (a validation set: name it as --validation-dataset)" in (
        refused.output
    )
    assert "unlabelled" not in refused.output


def test_jobs_quote_takes_a_validation_set_as_submit_does(dpsyn, trec_file, tmp_path):
    """A submission turned into a quote by its verb alone: ``--validation-dataset`` used to be
    read as a method parameter and refused as the method's. A validation set costs nothing,
    so the quote is the same with it; a private dataset named as one is refused as submit
    refuses it."""
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "5").exit_code == 0
    validation = _validation_set(dpsyn, tmp_path)
    job = ("--dataset", dataset, "--method", "tang", "--epsilon", "2", *FAST, "--json")
    plain = dpsyn("jobs", "quote", *job)
    validated = dpsyn("jobs", "quote", *job, "--validation-dataset", validation)
    assert validated.exit_code == 0, validated.output
    assert json.loads(validated.stdout)["spent_after"] == json.loads(plain.stdout)["spent_after"]
    private = dpsyn("jobs", "quote", *job, "--validation-dataset", dataset)
    assert private.exit_code == 1, private.output
    assert f"--validation-dataset: dataset '{dataset}' is private" in private.output


def test_submit_says_why_jobs_past_the_plain_sum_are_admitted(dpsyn, trec_file):
    """Issue 34: jobs of epsilon 3.5 + 2 + 5 were all admitted on a budget of 6 and the CLI
    did not say why; each submission now prints the composed spend beside the plain sum."""
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "6").exit_code == 0
    said = []
    for epsilon in ("3.5", "2", "1.5"):
        result = dpsyn(
            "jobs", "submit", "--dataset", dataset, "--method", "tang", "--epsilon", epsilon,
            *FAST, "--wait", "--poll", "0.1",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        said.append(next(line for line in result.stderr.splitlines() if "dataset spend" in line))
    # the job and the dataset's count release (5% of the budget, charged once), said so
    counts = re.search(r"of it, epsilon ([\d.]+) is the dataset's count release", said[0])
    assert counts and float(counts[1]) == pytest.approx(0.3, rel=1e-3), said[0]
    first = re.search(r"dataset spend now ([\d.]+) of 6 \((\d+)%\), composed over 1 job", said[0])
    # one job after the release: the one-batch rule, the job composed at half the delta
    assert first and 3.5 + 0.3 < float(first[1]) < (3.5 + 0.3) * 1.1, said[0]
    assert "by the one-batch rule" in said[0]
    assert "sum to" not in said[0]  # one job: nothing to explain
    last = re.search(r"now ([\d.]+) of 6 .* composed over 3 job\(s\) by the Rényi filter "
                     r"[^;]*; their epsilons sum to ([\d.]+)", said[2])  # fmt: skip
    assert last, said[2]
    assert float(last[1]) <= 6 < float(last[2]) == pytest.approx(7 + 0.3, rel=0.01)
    assert "composed privacy loss grows slower than the sum" in said[2]


def test_budget_list_all_tenants_with_an_organisation_key(dpsyn, sqlite_url, trec_file):
    """``--all-tenants`` reads every tenant's budgets with an org:read key made by the
    operator, and is refused to a tenant's admin key (tenant isolation stays)."""
    ours = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", ours, "--epsilon", "5").exit_code == 0
    with session_scope(sqlite_url) as session:
        other, other_admin = create_tenant(session, f"other-{uuid.uuid4().hex[:8]}")
        org, _ = create_tenant(session, f"org-{uuid.uuid4().hex[:8]}")
        _, org_key = create_key_for(session, org, KeyScope.ORG_READ, "privacy officer")
        other_name = other.name
    theirs = dpsyn("datasets", "upload", str(trec_file), "--task", "trec", "-q",
                   "--key", other_admin).stdout.strip()  # fmt: skip
    assert dpsyn("budget", "set", theirs, "--epsilon", "3", "--key", other_admin).exit_code == 0

    fleet = dpsyn("budget", "list", "--all-tenants", "--key", org_key)
    assert fleet.exit_code == 0, fleet.output
    rows = {line.split()[1]: line for line in fleet.stdout.splitlines()[1:]}
    assert {ours, theirs} <= set(rows)
    assert rows[theirs].startswith(other_name)  # the tenant column comes first
    refused = dpsyn("budget", "list", "--all-tenants")  # the test server's admin key
    assert refused.exit_code == 1 and "org_key_required" in refused.output
    own = json.loads(dpsyn("budget", "list", "--json").stdout)
    assert theirs not in {row["dataset_id"] for row in own}
