"""``dpsyn eval`` end to end on a fake backend: its progress off a terminal (issue 12)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from app.cli import app
from tests.eval.test_experiment import EvalFake, _records

runner = CliRunner()


@pytest.fixture(autouse=True)
def fake_data_and_model(monkeypatch):
    """TREC-shaped records and a fake backend in place of the shared data and the model."""
    monkeypatch.setattr("app.cli.eval.load_split", lambda dataset, data_dir: _records())
    monkeypatch.setattr(
        "app.cli.eval.make_backend",
        lambda kind, model, url, dtype: EvalFake(marker="Question:"),
    )


def test_eval_logs_plain_progress_lines_when_stderr_is_not_a_terminal(tmp_path):
    result = runner.invoke(
        app,
        [
            "eval", "--dataset", "trec", "--seeds", "1", "--epsilons", "8", "--methods",
            "tang", "--M", "2", "--N", "1", "--tmax", "4", "--K", "10", "--out-dir",
            str(tmp_path), "--no-calibrate",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    runs = [line for line in lines if line.startswith("[")]  # one per finished run
    assert len(runs) >= 4
    assert f"evaluating: 0/{len(runs)} runs (0%), 0:00:00 elapsed" in lines
    assert any(
        line.startswith(f"evaluating: {len(runs)}/{len(runs)} runs (100%), ") for line in lines
    )


def test_eval_runs_the_adadpsyn_variant_it_is_asked_for(tmp_path, monkeypatch):
    """--variant paper reaches every AdaDPSyn run's plan (recorded in runs.json)."""
    import json

    seen: list[str] = []
    real = __import__("app.methods.token_loop", fromlist=["synthesize"]).synthesize

    def recording(task, train, config, backend, *args, **kwargs):
        seen.append(config.variant.value)
        return real(task, train, config, backend, *args, **kwargs)

    monkeypatch.setattr("app.methods.token_loop.synthesize", recording)  # the job's path
    result = runner.invoke(
        app,
        [
            "eval", "--dataset", "trec", "--seeds", "1", "--epsilons", "8", "--methods",
            "adadpsyn", "--M", "2", "--N", "1", "--tmax", "4", "--K", "10", "--out-dir",
            str(tmp_path), "--no-calibrate", "--variant", "paper",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert seen and set(seen) == {"paper"}
    config = json.loads((tmp_path / "runs.json").read_text())["meta"]["config"]
    assert config["params"]["variant"] == "paper"


@pytest.mark.parametrize("declared", [False, True])
def test_eval_plans_with_released_counts_unless_told_they_are_public(
    tmp_path, monkeypatch, declared
):
    """Issue 32: by default every run plans as a job on an undeclared dataset does (its
    counts released under DP, charged); --public-counts plans with the exact counts."""
    import json

    from app.eval import methods as eval_methods

    seen: list[tuple[bool, object]] = []
    real = eval_methods.plan_local

    def recording(method, task, config, sizes, **kwargs):
        local = real(method, task, config, sizes, **kwargs)
        seen.append((local.plan.plan.config.public_counts, local.release))
        return local

    monkeypatch.setattr(eval_methods, "plan_local", recording)
    result = runner.invoke(
        app,
        [
            "eval", "--dataset", "trec", "--seeds", "1", "--epsilons", "8", "--methods",
            "tang", "--M", "2", "--N", "1", "--tmax", "4", "--K", "10", "--out-dir",
            str(tmp_path), "--no-calibrate", "--no-baselines",
            *(["--public-counts"] if declared else []),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert seen and {public for public, _ in seen} == {declared}
    # the run's own count release (issue 41: released once, at a share of its target), or none
    assert all((release is None) == declared for _, release in seen)
    config = json.loads((tmp_path / "runs.json").read_text())["meta"]["config"]
    assert config["public_counts"] is declared
