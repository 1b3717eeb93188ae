"""``dpsyn privacy epsilon|calibrate``: machine-readable output and one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.privacy.unit import DEFAULT_DELTA

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
