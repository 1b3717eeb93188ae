"""``dpsyn privacy epsilon|calibrate|plan|quote``: machine-readable output and one-line
errors; a quote is what the service plans for the same shape."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.db.models import Job
from app.db.session import session_scope
from app.privacy.unit import DEFAULT_DELTA
from tests.api.conftest import FAST_PARAMS, Api, auth, make_api

runner = CliRunner()
TREC = [
    "--M",
    "20",
    "--N",
    "2",
    "--tmax",
    "15",
    "--n-label",
    "835",
    "--n-total",
    "5452",
]
ADADPSYN = ["--method", "adadpsyn", "--sigma0", "15", "--sigma2", "5", "--T", "2"]


def invoke(*args: str):
    return runner.invoke(app, ["privacy", *args])


@pytest.mark.parametrize(
    ("accounting", "delta", "low", "high"),
    [
        ("paper", None, 10.0, 11.0),  # at the public default delta, 1e-6 (issue 32)
        ("tight", None, 6.0, 8.0),
        ("paper", 1 / 5452, 7.0, 8.0),  # at the papers' 1/|D|, given explicitly
        ("tight", 1 / 5452, 3.0, 5.0),
    ],
)
def test_epsilon_json_for_the_trec_example(accounting, delta, low, high):
    given = ["--delta", repr(delta)] if delta is not None else []
    result = invoke(
        "epsilon", *ADADPSYN, "--sigma1", "1.09", "--accounting", accounting, *TREC, *given,
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert low < out["epsilon"] < high
    assert out["delta"] == pytest.approx(delta if delta is not None else DEFAULT_DELTA)


def test_calibrate_round_trips_through_epsilon():
    result = invoke("calibrate", *ADADPSYN, "--epsilon", "4", *TREC, "--json")
    assert result.exit_code == 0, result.output
    solved = json.loads(result.stdout)
    assert 3.96 <= solved["epsilon"] <= 4.0
    check = invoke("epsilon", *ADADPSYN, "--sigma1", str(solved["sigma1"]), *TREC, "--json")
    assert json.loads(check.stdout)["epsilon"] == pytest.approx(solved["epsilon"], rel=1e-6)


def test_calibrate_tang_reports_sigma():
    result = invoke("calibrate", "--method", "tang", "--epsilon", "2", *TREC, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"sigma", "epsilon", "delta"}


def test_replace_one_across_labels_costs_more_than_one_label():
    one = invoke("epsilon", *ADADPSYN, "--sigma1", "1.09", "--accounting", "paper", *TREC, "--json")
    two = invoke(
        "epsilon",
        *ADADPSYN,
        "--sigma1",
        "1.09",
        "--accounting",
        "paper",
        *TREC,
        "--n-labels",
        "2",
        "--json",
    )
    assert json.loads(two.stdout)["epsilon"] > json.loads(one.stdout)["epsilon"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["epsilon", "--method", "tang", *TREC], "--sigma is required"),
        (["epsilon", *ADADPSYN, "--sigma1", "-1", *TREC], "sigma1"),
        (
            ["epsilon", *ADADPSYN, "--sigma1", "1", "--accounting", "paper", "--n-label", "30"],
            "cannot draw 40",
        ),
        (["epsilon", *ADADPSYN, "--sigma1", "1", *TREC, "--delta", "2"], "--delta"),
        (["calibrate", *ADADPSYN, "--epsilon", "0.01", *TREC], "cannot be met"),
        (["calibrate", *ADADPSYN, "--epsilon", "-1", *TREC], "positive"),
    ],
)
def test_bad_input_is_a_one_line_error(args, message):
    result = invoke(*args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_plan_prints_the_planners_choice_and_its_price():
    """`dpsyn privacy plan` gives what a job of that shape would plan, priced at most at the
    target; a shape whose checks cannot pay plans none (T = 0, sigma1 = Tang's sigma)."""
    shape = ["--M", "10", "--K", "50", "--tmax", "30", "--n-labels", "4", "--n-label", "357"]
    result = invoke("plan", "--epsilon", "1", *shape, "--n-total", "4998", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["T"] == out["planner_T"] == 0 and out["sigma2"] is None
    assert out["sigma1"] == pytest.approx(out["planner_tang_sigma"], rel=1e-6)
    assert 0.99 <= out["epsilon"] <= 1.0 and out["delta"] == DEFAULT_DELTA  # never 1/|D|
    # the chosen clip (towards uniform; issue 19) is in the stats and in the parameters
    assert out["clip"] == out["planner_clip"] > 0
    assert out["planner_agreement"] > out["planner_tang_agreement"]
    text = invoke("plan", "--epsilon", "1", *shape, "--n-total", "4998")
    assert text.exit_code == 0 and "no coverage checks" in text.stdout
    assert f"clipped to {out['clip']} around the uniform distribution" in text.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epsilon", "-1"], "epsilon"),
        (["--epsilon", "1", "--K", "1"], "K"),
        (["--epsilon", "1", "--n-labels", "30", "--n-label", "357"], "exceed --n-total"),
    ],
)
def test_plan_bad_input_is_a_one_line_error(args, message):
    result = invoke("plan", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1


# --- `dpsyn privacy quote`: any registered method's job, planned as the service plans it ---

TOY_SHAPE = ["--labels", "w5,w7", "--n-label", "12", "--epsilon", "1"]  # tests.api's toy data
TOY_PARAMS = ["--M", "2", "--N", "1", "--tmax", "4", "--K", "8", "--shots", "2"]
PAPER = ["--public-counts", "--accounting", "paper"]


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def quote(*args: str) -> dict:
    result = invoke("quote", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def by_label(event: dict) -> list[dict]:
    return sorted(event["labels"], key=lambda entry: entry["label"])


@pytest.mark.parametrize("accounting", ["tight", "paper"])
def test_a_quote_is_what_the_service_plans_for_the_same_shape(api: Api, accounting: str):
    """A tang job on the toy dataset of the API's tests (two labels of 12 records, declared
    public), quoted with no server: the epsilon and delta of the API's quote
    (``POST /v1/jobs/quote``), and the event that a submission of it reserves. All three
    plan through ``app.services.job_plan.plan_job``."""
    dataset = api.upload(counts_public=True)
    assert api.budget(dataset["id"], 5.0, accounting=accounting).status_code == 200
    body = {"dataset_id": dataset["id"], "method": "tang", "epsilon": 1.0, "shots": 2}
    body["params"] = FAST_PARAMS
    served = api.client.post("/v1/jobs/quote", json=body, headers=auth(api.admin))
    assert served.status_code == 200, served.text
    submitted = api.client.post("/v1/jobs", json=body, headers=auth(api.admin))
    assert submitted.status_code == 201, submitted.text
    with session_scope(api.url) as session:
        job = session.get(Job, submitted.json()["id"])
        assert job is not None
        reserved = job.event

    given = ["--public-counts", "--accounting", accounting]
    local = quote("--method", "tang", *TOY_SHAPE, *TOY_PARAMS, *given)
    assert local["epsilon"] == pytest.approx(served.json()["epsilon"], rel=1e-9)
    assert local["delta"] == served.json()["delta"] == DEFAULT_DELTA
    assert by_label(local["event"]) == by_label(reserved)  # listed in the drawn schedule's order
    assert local["accounting"] == accounting and local["counts_public"] is True
    assert local["config"]["synthesis"]["M"] == 2  # the options reached the method's config


def test_a_quote_on_counts_not_declared_public_prices_their_release():
    """Without --public-counts the job plans, as a job on a dataset without the declaration
    does, from the dataset's one count release (issue 41): priced as if it had estimated the
    sizes given, the release itself not in the job's event (it is charged once per dataset,
    its share said), each label at its own noise."""
    out = quote("--method", "tang", *TOY_SHAPE, *TOY_PARAMS)
    assert out["counts_public"] is False and out["epsilon"] <= 1.0
    labels = out["event"]["labels"]
    assert sorted(entry["label"] for entry in labels) == ["w5", "w7"]
    assert not any(entry.get("count_release") for entry in labels)
    assert out["count_release_share"] == 0.05
    assert set(out["noise_by_label"]) == {"w5", "w7"}  # equal sizes: the same noise
    declared = quote("--method", "tang", *TOY_SHAPE, *TOY_PARAMS, "--public-counts")
    assert declared["count_release_share"] is None
    assert declared["noise_by_label"] == out["noise_by_label"]


def test_a_quote_in_words_names_the_event_and_its_noise():
    result = invoke("quote", "--method", "tang", *TOY_SHAPE, *TOY_PARAMS, "--public-counts")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "tang: 2 shots, M 2, N 1, tmax 4, K 8"
    assert lines[1].startswith("tang: epsilon = 0.99") and "tight accounting" in lines[1]
    assert (
        lines[3].startswith("  PartitionEvent('w") and "SampledEvent(PoissonSampling(" in lines[3]
    )
    noise = next(i for i, line in enumerate(lines) if line.startswith("noise multipliers: "))
    # then each label's own (the token loop calibrates each label to its own size)
    assert [line.split(":")[0] for line in lines[noise + 1 :]] == ["  w5", "  w7"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "tang", "--n-label", "12", "--epsilon", "1"], "the task: give --task"),
        ([*TOY_SHAPE, "--n-labels", "3"], "--labels and --n-labels both"),
        (["--task", "trec", *TOY_SHAPE], "only for a custom task"),
        (["--task", "mitg", "--n-label", "5", "--epsilon", "1"], "classification task"),
        ([*TOY_SHAPE, "--n-total", "20"], "--n-total 20 is fewer than 2 labels"),
        (["--method", "tang", *TOY_SHAPE, "--teachers", "5"], "--teachers are for promptpate"),
        (["--method", "promptpate", *TOY_SHAPE], "needs --n-public"),
        (["--method", "tang", *TOY_SHAPE, "--n-public", "5"], "--n-public is only used"),
        (["--method", "tang", *TOY_SHAPE, "--accounting", "paper"], "pass --public-counts"),
        (["--method", "tang", *TOY_SHAPE, "--epsilon", "inf"], "--epsilon: must be a positive"),
        (["--method", "tang", *TOY_SHAPE, "--M", "500"], "field 'M'"),
        (["--method", "tang", *TOY_SHAPE, "--delta", "2"], "field 'delta'"),
        (["--method", "tang", *TOY_SHAPE, *PAPER, "--M", "20"], "cannot draw 40 records"),
    ],
)
def test_quote_bad_input_is_a_one_line_error(args, message):
    result = invoke("quote", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
