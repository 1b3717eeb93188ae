"""One value prints the same in the CLI, in the API's text and on the dashboard (issue 55,
item 3): a job's planned and charged epsilon (one number: "planned 2, charged 1.999" was two
roundings of 1.99999999), a budget's remainder (the CLI said 1.795 where the dashboard said
1.796), and a quote's composed spend beside its plain sum, each said with the delta it holds
at (the plain sum read below the spend without a word on why).

Against the live test server: the CLI through ``dpsyn``, the API with its key, the dashboard
signed in with the same key. Every figure is compared with :mod:`app.privacy.display`'s text
and with the others, and where the old roundings differed the test checks that they did for
its values (so it would catch either rounding coming back)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import httpx
import pytest

from app.privacy.display import delta_text, epsilon_text
from tests.cli.live_server import FAST, KEY, SECRET, upload
from tests.ui.test_pages import csrf_of

#: The dashboard's job form for the CLI's FAST options (the same plan).
FORM_PARAMS = {"param_M": "4", "param_N": "2", "param_tmax": "4", "param_K": "10",
               "param_min_words": "1"}  # fmt: skip


@pytest.fixture
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, headers={"Authorization": f"Bearer {KEY}"}) as client:
        yield client


@pytest.fixture
def ui(server: str) -> Iterator[tuple[httpx.Client, str]]:
    """The dashboard signed in with the CLI's key, and its CSRF token."""
    with httpx.Client(base_url=server) as client:
        login = client.get("/ui/login")
        signed = client.post("/ui/login", data={"csrf": csrf_of(login.text), "api_key": KEY})
        assert signed.status_code in (200, 303), signed.text
        yield client, csrf_of(client.get("/ui/prompts").text)


def _by_id(page: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</', page, re.S)
    assert match, element_id
    return html.unescape(match.group(1)).strip()


def _submitted(dpsyn, dataset: str, epsilon: str) -> dict:
    result = dpsyn(
        "jobs", "submit", "--dataset", dataset, "--method", "tang", "--epsilon", epsilon,
        *FAST, "--wait", "--poll", "0.1", "-q", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _job_with_two_roundings(dpsyn, api, dataset: str) -> dict:
    """A job asked for epsilon 2 whose planned epsilon is one the old roundings printed two
    ways ("2" / "1.999"). The planner calibrates to the noisy count release, so how close it
    comes to 2 varies from job to job (1.99914 prints "1.999" both ways): up to eight jobs
    are tried, each costing about 2 of the budget of 40."""
    for _ in range(8):
        job = api.get(f"/v1/jobs/{_submitted(dpsyn, dataset, '2')['id']}").json()
        if f"{job['epsilon']:.4g}" != epsilon_text(job["epsilon"]):
            return job
    raise AssertionError("no job's epsilon was one the two roundings print apart")


def test_a_jobs_planned_and_charged_epsilon_print_alike_everywhere(dpsyn, api, ui, trec_file):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "40").exit_code == 0
    job = _job_with_two_roundings(dpsyn, api, dataset)
    exact = job["epsilon"]  # the accountant's epsilon of the planned noise, at most the 2 asked
    assert job["charged_epsilon"] == exact  # one number: the ledger reserves the planned one
    shown = epsilon_text(exact)

    assert f"epsilon {shown} (2 asked) at delta 1e-6" in dpsyn("jobs", "show", job["id"]).stdout
    row = next(r for r in dpsyn("jobs", "list").stdout.splitlines() if r.startswith(job["id"]))
    assert row.split()[3:5] == [shown, shown]  # planned, charged

    client, _ = ui
    page = client.get(f"/ui/jobs/{job['id']}").text
    assert _by_id(page, "job-planned") == shown == _by_id(page, "job-charged")
    assert _by_id(page, "job-asked") == "2"  # where they really differ, the page says both
    status = client.get(f"/ui/jobs/{job['id']}/status", headers={"Accept": "application/json"})
    assert status.json()["charged_text"] == shown  # what the page's script writes in
    table = re.search(rf'data-job-id="{job["id"]}"(.*?)</tr>', client.get("/ui/jobs").text, re.S)
    assert table and table.group(1).count(f">{shown}<") == 2, table and table.group(1)


def _remaining_with_two_roundings(dpsyn, api, dataset: str) -> dict:
    """Set the budget so that its remainder is one the old roundings printed two ways (the
    filter's spend follows the budget's epsilon, so it is read back, not predicted)."""
    for step in range(12):
        spent = api.get(f"/v1/datasets/{dataset}/budget").json()["spent"]
        total = spent + 1.7956 + step * 0.0107
        assert dpsyn("budget", "set", dataset, "--epsilon", repr(total)).exit_code == 0
        budget = api.get(f"/v1/datasets/{dataset}/budget").json()
        if f"{budget['remaining']:.4g}" != epsilon_text(budget["remaining"]):
            return budget
    raise AssertionError("no budget gave a remainder the two roundings print apart")


def test_a_remaining_budget_prints_alike_in_the_cli_the_api_and_the_dashboard(
    dpsyn, api, ui, trec_file
):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    _submitted(dpsyn, dataset, "2")
    budget = _remaining_with_two_roundings(dpsyn, api, dataset)
    left = epsilon_text(budget["remaining"])
    assert float(left) <= budget["remaining"]  # never more than is left

    shown = dpsyn("budget", "show", dataset).stdout
    assert f", {left} remaining" in shown, shown
    client, _ = ui
    assert _by_id(client.get(f"/ui/datasets/{dataset}").text, "budget-remaining") == left
    listed = client.get("/ui/datasets").text
    row = re.search(rf'href="/ui/datasets/{dataset}"(.*?)</tr>', listed, re.S)
    assert row and f'class="num remaining">{left}<' in row.group(1)
    # the API's text: a job that does not fit names the same remainder
    refused = api.post(
        "/v1/jobs",
        json={"dataset_id": dataset, "method": "tang", "epsilon": 5.0, "shots": 2,
              "params": {"M": 4, "N": 2, "tmax": 4, "K": 10, "min_words": 1}},
    )  # fmt: skip
    assert refused.status_code == 409, refused.text
    assert f", {left} remaining;" in refused.json()["error"]["message"]


def test_a_quote_says_at_which_delta_each_figure_holds(dpsyn, api, ui, trec_file):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "10").exit_code == 0
    _submitted(dpsyn, dataset, "2")
    budget = api.get(f"/v1/datasets/{dataset}/budget").json()
    quoted = ("--dataset", dataset, "--method", "tang", "--epsilon", "9", *FAST)
    quote = json.loads(dpsyn("jobs", "quote", *quoted, "--json").stdout)
    # The plain sum is basic composition: each live job's epsilon at its own delta, and the
    # count release's at its share, so it holds at their deltas summed, not the budget's.
    live = {e["job_id"] for e in budget["history"] if e["kind"] == "reserve"} - {
        e["job_id"] for e in budget["history"] if e["kind"] == "release"
    }
    deltas = [e["delta"] for e in budget["history"] if e["kind"] == "counts"] + [
        e["delta"] for e in budget["history"] if e["kind"] == "reserve" and e["job_id"] in live
    ]
    assert quote["spent_delta"] == budget["delta"]
    assert quote["plain_sum_delta_after"] == pytest.approx(sum(deltas) + quote["delta"])
    plain_delta = delta_text(quote["plain_sum_delta_after"])
    assert plain_delta != delta_text(budget["delta"])
    # Which of the two reads higher follows the noisy count release the job was planned on;
    # the case issue 55 met (the plain sum below the spend) must say why, the other need not.
    below = quote["plain_sum_after"] < quote["spent_after"]

    words = dpsyn("jobs", "quote", *quoted).stdout
    said = re.search(
        r"at delta (\S+): spent (\S+) of 10 now, (\S+) \(\d+%\) if admitted; a plain sum would "
        r"say (\S+) at delta (\S+?)(?: \(the jobs' and the count release's deltas summed|$)",
        words,
        re.M,
    )
    assert said, words
    assert ("the jobs' and the count release's deltas summed" in words) == below, words
    assert said.groups() == (
        delta_text(budget["delta"]),
        epsilon_text(quote["spent"]),
        epsilon_text(quote["spent_after"]),
        epsilon_text(quote["plain_sum_after"]),
        plain_delta,
    )
    assert SECRET not in words

    # The dashboard's "Check the cost" prints the server's texts: the same figures.
    client, csrf = ui
    form = {"csrf": csrf, "dataset_id": dataset, "method": "tang", "epsilon": "9", "shots": "2",
            **FORM_PARAMS}  # fmt: skip
    box = client.post("/ui/jobs/quote", data=form, headers={"Accept": "application/json"})
    assert box.status_code == 200, box.text
    text = box.json()["text"]
    assert (
        text["spent_delta"], text["spent"], text["spent_after"], text["plain_sum_after"],
        text["plain_sum_delta_after"],
    ) == said.groups()  # fmt: skip
    assert text["epsilon"] == epsilon_text(quote["epsilon"])

    shown = dpsyn("budget", "show", dataset).stdout
    plain = epsilon_text(budget["plain_sum"])
    assert f"(plain sum {plain} at delta {delta_text(budget['plain_sum_delta'])}" in shown
    page = client.get(f"/ui/datasets/{dataset}").text
    assert _by_id(page, "budget-sum-delta") == delta_text(budget["plain_sum_delta"])
    # The datasets table, too: each figure beside the delta it holds at.
    row = _row(client.get("/ui/datasets").text, dataset)
    assert _in_class(row, "budget-delta") == f"at δ {delta_text(budget['delta'])}"
    assert _in_class(row, "plain-sum-delta") == f"at δ {delta_text(budget['plain_sum_delta'])}"


def _row(page: str, dataset: str) -> str:
    """The datasets table's row of ``dataset``."""
    match = re.search(rf'<tr data-dataset-id="{dataset}".*?</tr>', page, re.S)
    assert match, dataset
    return match.group(0)


def _in_class(row: str, name: str) -> str:
    match = re.search(rf'class="[^"]*\b{name}\b[^"]*"[^>]*>(.*?)</', row, re.S)
    assert match, name
    return html.unescape(match.group(1)).strip()


@pytest.mark.parametrize(("plain", "why"), [(2.198, True), (2.31, False)])
def test_a_plain_sum_below_the_spend_says_why(
    plain: float, why: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """The quote line of the issue's walk (a composed 2.204 above a plain sum of 2.198):
    each figure with its delta, and the reason the plain sum reads lower exactly when it
    does (the live test above meets whichever case the noisy count release gives)."""
    from app.cli.client.jobs import print_quote

    print_quote({
        "epsilon": 1.0, "delta": 1e-6, "dataset_id": "ds", "budget": 4.0, "spent": 1.2,
        "spent_after": 2.204, "spent_delta": 1e-6, "plain_sum_after": plain,
        "plain_sum_delta_after": 2.05e-6, "fits": True, "groups": [],
    })  # fmt: skip
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("dataset ds"))
    assert "at delta 1e-6: spent 1.2 of 4 now, 2.204" in line, line
    assert f"a plain sum would say {epsilon_text(plain)} at delta 2.05e-6" in line, line
    assert ("deltas summed, larger than the budget's" in line) == why, line
