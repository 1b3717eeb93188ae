"""What a new user with a custom task is told before anything is spent (issue 24, item 10):
how many labels the shots cover, the records per label after ``--label-map``, and no
third-party progress bar written to a stderr that is not a terminal."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from app.cli import app
from app.cli.custom_task import shots_coverage
from app.cli.model_options import quiet_progress_bars
from tests.cli.live_server import runner
from tests.synthesis.fake_backend import FakeBackend

NAMES = ("Company", "School", "Artist", "Athlete", "Politician", "Vehicle", "Building")
LABEL_MAP = ",".join(f"{number}={name}" for number, name in enumerate(NAMES, 1))
SMALL = ["--M", "4", "--N", "2", "--tmax", "3", "--K", "10"]


@pytest.fixture
def loaded(monkeypatch) -> list[bool]:
    """The fake model instead of the local one; records whether transformers' progress bars
    were on when the CLI loaded it."""
    from transformers.utils import logging as transformers_logging

    seen: list[bool] = []

    def make_backend(kind, *, model, url, dtype):
        seen.append(transformers_logging.is_progress_bar_enabled())
        return FakeBackend(stop_after=2, marker="Text:")

    monkeypatch.setattr("app.cli.synthesize.make_backend", make_backend)
    return seen


@pytest.fixture(autouse=True)
def progress_bars_back_on(monkeypatch) -> Iterator[None]:
    """Undo :func:`quiet_progress_bars` (process-wide switches) after each test."""
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    yield
    from huggingface_hub.utils import enable_progress_bars
    from transformers.utils import logging as transformers_logging

    enable_progress_bars()
    transformers_logging.enable_progress_bar()


@pytest.fixture
def headerless(tmp_path):
    """Seven labels numbered 1..7 (label id, title, abstract; no header), 10 rows each."""
    rows = [f'{n},Title {n},"secretabstract {i} about {n}"' for n in range(1, 8) for i in range(10)]
    path = tmp_path / "seven.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def _synthesize(path, *args: str):
    return runner.invoke(
        app,
        ["synthesize", "--data", str(path), "--text-col", "2+3", "--label-col", "1", *SMALL,
         *args],
    )  # fmt: skip


def test_the_plan_says_how_many_labels_the_shots_cover(headerless, loaded):
    # Issue 34: by default a task of a few labels (7 here) gets one shot per label.
    every = _synthesize(headerless, "--label-map", LABEL_MAP)
    assert every.exit_code == 0, every.output
    plan, coverage = every.stderr.splitlines()[1:3]
    assert plan.startswith("adadpsyn: 7 shots, M 4, N 2, tmax 3, K 10")
    assert coverage == "7 shots cover all 7 labels" and "--shots 7 for" not in every.stderr
    fewer = _synthesize(headerless, "--label-map", LABEL_MAP, "--shots", "4")
    assert fewer.exit_code == 0, fewer.output
    assert fewer.stderr.splitlines()[2] == (
        "4 shots cover 4 of 7 labels (drawn at random): pass --shots 7 for a demonstration "
        "of every label"
    )


def test_coverage_wording():
    assert shots_coverage(1, 1, 2).startswith("1 shot covers 1 of 2 labels")
    assert shots_coverage(9, 3, 3) == "9 shots cover all 3 labels"


def test_records_per_label_are_printed_after_the_label_map(headerless, loaded):
    result = _synthesize(headerless, "--label-map", LABEL_MAP)
    assert result.exit_code == 0, result.output
    counts = result.stderr.splitlines()[0]
    assert counts == (
        "records per label after --label-map: Company 10, School 10, Artist 10, Athlete 10, "
        "Politician 10, Vehicle 10, Building 10 (70 records)"
    )
    assert "secretabstract" not in result.output


def test_a_map_that_leaves_a_label_empty_shows_before_anything_runs(headerless, loaded):
    """Map 8 (not in the file) to Building and 7 to Vehicle as well: Building gets no record.
    The counts show it; the run then stops at the empty label, before the model is loaded."""
    wrong = LABEL_MAP.replace("6=Vehicle,7=Building", "6=Vehicle,7=Vehicle,8=Building")
    result = _synthesize(headerless, "--label-map", wrong)
    assert result.exit_code == 2, result.output
    first = result.stderr.splitlines()[0]
    assert "Vehicle 20, Building 0 (70 records); no records for Building: check --label-map" in (
        first
    )
    assert loaded == []  # nothing was loaded, nothing spent


def test_upload_prints_the_records_per_label_name(dpsyn, headerless):
    result = dpsyn(
        "datasets", "upload", str(headerless), "--label-map", LABEL_MAP, "--text-col", "2+3",
        "--label-col", "1", "-q",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("records per label after --label-map: Company 10, School 10")
    assert "secretabstract" not in result.output


def test_no_third_party_progress_bar_off_a_terminal(headerless, loaded):
    """The CLI turns transformers' bars off before it loads a model when stderr is not a
    terminal (CliRunner's is not); a transformers bar then writes nothing."""
    from transformers.utils import logging as transformers_logging

    assert transformers_logging.is_progress_bar_enabled()
    result = _synthesize(headerless, "--label-map", LABEL_MAP)
    assert result.exit_code == 0, result.output
    assert loaded == [False]
    stream = io.StringIO()
    for _ in transformers_logging.tqdm(range(3), desc="Loading weights", file=stream):
        pass
    assert stream.getvalue() == ""


def test_a_terminal_keeps_its_progress_bars():
    from transformers.utils import logging as transformers_logging

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    quiet_progress_bars(Terminal())
    assert transformers_logging.is_progress_bar_enabled()
    quiet_progress_bars(io.StringIO())
    assert not transformers_logging.is_progress_bar_enabled()
