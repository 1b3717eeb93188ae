"""``dpsyn synthesize`` asks the method registry which options a method takes: an option of
another method, given explicitly, is refused with the methods that take it (it used to be
ignored silently for all but --M/--N/--tmax)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from app.cli import app
from tests.synthesis.fake_backend import FakeBackend

runner = CliRunner()


@pytest.fixture(autouse=True)
def fake_backend(monkeypatch):
    monkeypatch.setattr(
        "app.cli.synthesize.make_backend",
        lambda kind, **kw: FakeBackend(stop_after=2, marker="Text:"),
    )


@pytest.fixture
def tickets(tmp_path):
    rows = ["text,category"] + [f"ticket{i},{'billing' if i % 2 else 'network'}" for i in range(20)]
    path = tmp_path / "tickets.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


BASE = ["--task", "custom", "--labels", "billing,network", "--label-col", "category"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--teachers", "10"], "--teachers are for promptpate, not adadpsyn"),
        (["--student-shots", "2"], "--student-shots is for promptpate; adadpsyn takes --shots"),
        (["--method", "tang", "--max-chars", "100"], "--max-chars are for promptpate, not tang"),
        (
            ["--method", "promptpate", "--public", "PUBLIC", "--K", "5"],
            "--K are for tang/adadpsyn, not promptpate",
        ),
    ],
)
def test_an_option_of_another_method_is_refused(tickets, tmp_path, args, message) -> None:
    public = tmp_path / "public.txt"
    public.write_text("a text\nanother text\n")
    args = [str(public) if a == "PUBLIC" else a for a in args]
    result = runner.invoke(app, ["synthesize", "--data", str(tickets), *BASE, *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
