"""The local commands print a method's error only once its message passed the record-text
check against the records they read (issue 52, item 5: a plug-in's data check raised an
error quoting a TREC record, and ``dpsyn synthesize`` printed it).

The method is the test-only plug-in Talkative (``tests/methods/talkative.py``), whose run
fails with an error it words itself (``TALKATIVE_RAISES``). ``dpsyn synthesize`` runs it as
the issue's reviewer did, in a process of its own that loads it through
``DPSYN_METHOD_MODULES``, and in this process (typer's runner) for every kind of error;
``dpsyn eval``, ``advise`` and ``audit`` in this process. A message that quotes no record is
printed unchanged (the negative control), and a bug's traceback is left alone unless its
messages quote a record.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from app.cli import app as cli
from app.methods.registry import registered
from app.synthesis.record_text import WITHHELD
from tests.eval.test_audit import MemoryBackend
from tests.eval.test_experiment import EvalFake, _records
from tests.methods.talkative import PLAIN, TALKATIVE
from tests.synthesis.fake_backend import FakeBackend

ROOT = Path(__file__).resolve().parents[2]
MARKER = "SECRETTICKET"  # in every record of the data file
TASK = ["--task", "custom", "--labels", "billing,network", "--label-col", "category"]
PLUGIN = "from app.methods import register\nfrom tests.methods.talkative import TALKATIVE\n\n"
PLUGIN += "register(TALKATIVE)\n"
HARNESS = """
import app.cli.synthesize
from tests.synthesis.fake_backend import FakeBackend

app.cli.synthesize.make_backend = lambda kind, **kw: FakeBackend(stop_after=2)
"""
_FILES = itertools.count()
runner = CliRunner()


@pytest.fixture
def talkative() -> Iterator[None]:
    with registered(TALKATIVE):
        yield


def _tickets(tmp_path: Path) -> tuple[Path, list[str]]:
    """A private data file whose records are longer than the plug-in's check allows."""
    n = next(_FILES)
    texts = [
        f"{MARKER}{i}-{n} my invoice was charged twice after the router reboot" for i in range(20)
    ]
    rows = [f"{text},{'billing' if i % 2 else 'network'}" for i, text in enumerate(texts)]
    path = tmp_path / f"tickets{n}.csv"
    path.write_text("text,category\n" + "\n".join(rows) + "\n")
    return path, texts


def _synthesize(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Result, list[str]]:
    monkeypatch.setattr(
        "app.cli.synthesize.make_backend", lambda kind, **kw: FakeBackend(stop_after=2)
    )
    data, texts = _tickets(tmp_path)
    args = ["synthesize", "--data", str(data), *TASK, "--method", "talkative"]
    result = runner.invoke(cli, [*args, "--shots", "2", "--epsilon", "2"])
    return result, texts


def _quotes_none(printed: str, texts: list[str]) -> bool:
    return MARKER not in printed and not any(text[5:30] in printed for text in texts)


@pytest.mark.parametrize("raises", ["synthesis", "window", "value"])
def test_synthesize_withholds_a_message_that_quotes_a_record(
    talkative: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raises: str
) -> None:
    monkeypatch.setenv("TALKATIVE_RAISES", raises)
    result, texts = _synthesize(tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == f"error: {WITHHELD}"
    assert _quotes_none(result.output, texts)


def test_synthesize_shows_a_message_that_quotes_no_record(
    talkative: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: the same error path, a message with no record in it."""
    monkeypatch.setenv("TALKATIVE_RAISES", "plain")
    result, _ = _synthesize(tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == f"error: {PLAIN}"


def test_a_bug_that_quotes_a_record_loses_its_messages_not_its_place(
    talkative: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error of no kind the commands report (a bug) is raised as it is; when its message,
    or that of the error it came from, quotes a record, the command prints its type with the
    message withheld and where each error of the chain was raised, exit status 1."""
    monkeypatch.setenv("TALKATIVE_RAISES", "runtime")
    result, texts = _synthesize(tmp_path, monkeypatch)
    assert result.exit_code == 1, result.output
    assert f"error: RuntimeError: {WITHHELD}" in result.stderr
    assert "from KeyError (message withheld) at " in result.stderr
    assert "talkative.py" in result.stderr  # where it was raised
    assert _quotes_none(result.output, texts)


def test_a_bug_that_quotes_no_record_keeps_its_traceback(
    talkative: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: the check is no reason to hide a bug's own words."""

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the model file is corrupt")

    monkeypatch.setattr("app.cli.synthesize.make_backend", broken)
    data, _ = _tickets(tmp_path)
    args = ["synthesize", "--data", str(data), *TASK, "--method", "talkative", "--epsilon", "2"]
    result = runner.invoke(cli, args)
    assert isinstance(result.exception, RuntimeError)
    assert str(result.exception) == "the model file is corrupt"


def test_eval_withholds_a_message_that_quotes_a_record(
    talkative: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.cli.eval.load_split", lambda dataset, data_dir: _records())
    monkeypatch.setattr(
        "app.cli.eval.make_backend", lambda kind, model, url, dtype: EvalFake(marker="Question:")
    )
    args = ["eval", "--dataset", "trec", "--seeds", "1", "--epsilons", "8", "--no-baselines"]
    result = runner.invoke(cli, [*args, "--methods", "talkative", "--out-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == f"error: {WITHHELD}"
    assert "train question" not in result.output


def test_advise_withholds_a_message_that_quotes_a_record(
    talkative: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.cli.advise.make_backend", lambda *a, **k: EvalFake())
    data, texts = _tickets(tmp_path)
    rows = data.read_text().splitlines()[1:] * 3  # enough records to stand in and to query
    data.write_text("text,category\n" + "\n".join(rows) + "\n")
    args = ["advise", "--data", str(data), *TASK, "--methods", "talkative", "--shots", "2"]
    args += ["--text-field", "Question", "--label-field", "Type"]  # what the fake model reads
    result = runner.invoke(cli, [*args, "--seeds", "1", "--epsilons", "2"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == f"error: {WITHHELD}"
    assert _quotes_none(result.output, texts)


def test_audit_withholds_a_message_that_quotes_a_record(
    talkative: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "app.cli.audit.make_backend", lambda kind, model, url, dtype: MemoryBackend()
    )
    data = tmp_path / "data" / "sst2"
    data.mkdir(parents=True)
    lines = [f"{i % 2} {MARKER} review number {i} of the set, a long one" for i in range(80)]
    (data / "stsa.binary.train").write_text("\n".join(lines) + "\n")
    args = ["audit", "--data-dir", str(tmp_path / "data"), "--out-dir", str(tmp_path / "out")]
    args += ["--trials", "2", "--candidates", "3", "--methods", "talkative:2", "--members", "4"]
    result = runner.invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines()[-1] == f"error: {WITHHELD}"
    assert MARKER not in result.output


def test_dpsyn_synthesize_in_its_own_process_withholds_the_record(tmp_path: Path) -> None:
    """The issue's reproduction: the plug-in found through DPSYN_METHOD_MODULES, its data
    check quoting a record, through the real entry point; and the negative control."""
    (tmp_path / "talkative_plugin.py").write_text(PLUGIN)
    (tmp_path / "talkative_harness.py").write_text(HARNESS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DPSYN_", "TALKATIVE_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
        DPSYN_METHOD_MODULES="talkative_plugin, talkative_harness",
    )
    data, texts = _tickets(tmp_path)
    args = ["synthesize", "--data", str(data), *TASK, "--method", "talkative", "--epsilon", "2"]
    for raises, said in (("synthesis", WITHHELD), ("plain", PLAIN)):
        ran = subprocess.run(
            [sys.executable, "-c", "from app.cli import main; main()", *args],
            cwd=tmp_path,
            env={**env, "TALKATIVE_RAISES": raises},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ran.returncode == 2, ran.stderr[-2000:]
        assert ran.stderr.strip().splitlines()[-1] == f"error: {said}"
        assert _quotes_none(ran.stdout + ran.stderr, texts)
