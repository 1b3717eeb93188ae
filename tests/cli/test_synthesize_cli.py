"""``dpsyn synthesize`` end to end with a fake backend, and its one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.cli import app
from tests.synthesis.fake_backend import FakeBackend

runner = CliRunner()


@pytest.fixture(autouse=True)
def fake_backend(monkeypatch):
    monkeypatch.setattr(
        "app.cli.synthesize.make_backend",
        lambda kind, model, url, dtype: FakeBackend(stop_after=2, marker="Text:"),
    )


@pytest.fixture
def tickets(tmp_path):
    rows = ["text,category"] + [
        f"secretticket{i},{'billing' if i % 2 else 'network'}" for i in range(60)
    ]
    path = tmp_path / "tickets.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


CUSTOM = ["--task", "custom", "--labels", "billing,network", "--text-col", "text"]


def test_custom_csv_task_runs_and_writes_json(tickets, tmp_path):
    out = tmp_path / "result.json"
    result = runner.invoke(
        app,
        [
            "synthesize",
            "--data",
            str(tickets),
            *CUSTOM,
            "--label-col",
            "category",
            "--epsilon",
            "4",
            "--M",
            "4",
            "--N",
            "2",
            "--tmax",
            "4",
            "--shots",
            "2",
            "--K",
            "10",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "epsilon = " in result.stdout
    data = json.loads(out.read_text())
    assert [d["label"] for d in data["demonstrations"]] != []
    assert 3.96 <= data["epsilon"] <= 4.0
    assert "secretticket" not in result.stdout + json.dumps(data["prompt"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "missing.csv", *CUSTOM, "--label-col", "category"], "missing.csv"),
        (["--label-col", "nosuchcolumn"], "nosuchcolumn"),
        (["--label-col", "category", "--epsilon", "0"], "--epsilon must be > 0"),
        (["--label-col", "category", "--epsilon", "-2"], "--epsilon must be > 0"),
        (["--label-col", "category", "--epsilon", "0.0001"], "cannot be met"),
        (["--label-col", "category", "--accounting", "paper", "--M", "40"], "cannot draw"),
    ],
)
def test_bad_input_is_a_one_line_error(tickets, args, message):
    base = ["synthesize", "--data", str(tickets), *CUSTOM]
    if args[0] == "--data":
        base = ["synthesize"]
    result = runner.invoke(app, [*base, *args, "--tmax", "3"])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "secretticket" not in result.stderr


def test_a_label_with_no_records_is_named(tmp_path):
    path = tmp_path / "one_label.csv"
    path.write_text("text,category\n" + "".join(f"t{i},billing\n" for i in range(30)))
    result = runner.invoke(
        app, ["synthesize", "--data", str(path), *CUSTOM, "--label-col", "category", "--tmax", "3"]
    )
    assert result.exit_code == 2
    assert "network" in result.stderr
