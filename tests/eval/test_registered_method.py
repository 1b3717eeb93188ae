"""A method registered here, and nowhere else, runs through ``run_experiment`` and
``dpsyn eval --methods NAME --param ...`` with no change to app/eval or app/cli.

The method ("fixed") writes one demonstration per scheduled label from a parameter (public
text only) and charges its epsilon. The tests check that the evaluation planned it from a
count release of the training set's counts, charged in the run's epsilon (a local run's own
release, issue 41: the service's is the dataset's), passed it its parameter and the job's
fields, and scored the prompt it released.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict
from typer.testing import CliRunner

from app.eval.experiment import ExperimentConfig, run_experiment, settings_grid
from app.eval.icl import evaluate
from app.methods import registry
from app.methods.base import Counts, JobConfig, Method, MethodPlan, Stored
from app.privacy.events import PateEvent
from app.privacy.unit import DEFAULT_DELTA
from app.results import Demonstration, SynthesisResult
from app.synthesis.generator import partition_sizes
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.tasks import BUILTIN_TASKS
from tests.eval.test_experiment import EvalFake, _records

TREC = BUILTIN_TASKS["trec"]


class FixedParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    topic: str | None = None


class FixedConfig(JobConfig):  # epsilon, delta (public default), accounting, seed
    model_config = ConfigDict(extra="forbid", frozen=True)  # another method's would fail
    shots: int
    topic: str = "nothing"


@dataclass(frozen=True)
class FixedPlan(MethodPlan):
    task: Any
    config: FixedConfig
    counts: Counts

    @property
    def delta(self) -> float:
        return self.config.delta  # public, never 1/|D|

    def event(self) -> PateEvent:
        return PateEvent(noise_multiplier=1.0, relation="add_or_remove")

    def epsilon(self) -> float:
        return self.config.epsilon

    @property
    def progress_total(self) -> int:
        return self.config.shots

    def stored(self) -> Stored:
        return Stored(self.config.model_dump(), [], self.delta)

    def run(self, records, backend, progress, public=()) -> SynthesisResult:
        labels = list(self.task.labels)[: self.config.shots]
        demos = [Demonstration(label, f"a question about {self.config.topic}") for label in labels]
        return SynthesisResult(
            task=self.task.name,
            method="fixed",
            model=backend.name,
            demonstrations=demos,
            prompt=demonstration_prompt(self.task, [(d.label, d.text) for d in demos]),
            epsilon=self.config.epsilon,
            delta=self.delta,
            plan={},
            event={},
        )


class FixedMethod(Method):
    """A test-only method: the configs and counts it planned are kept in ``seen``."""

    name = "fixed"
    title = "Fixed demonstrations"
    params: ClassVar[type[BaseModel]] = FixedParams
    unit: ClassVar[str] = "shots"
    verb: ClassVar[str] = "writing"
    cli_shots_option: ClassVar[str] = "--shots"

    def __init__(self) -> None:
        self.seen: list[tuple[FixedConfig, Counts]] = []

    def configure(
        self,
        task,
        *,
        epsilon: float,
        delta: float | None,
        shots: int | None,
        accounting,
        params: Mapping[str, Any] | None,
        seed: int | None = None,
    ) -> FixedConfig:
        given = {k: v for k, v in (params or {}).items() if v is not None}
        if delta is not None:
            given["delta"] = delta
        return FixedConfig(epsilon=epsilon, shots=shots or 1, seed=seed, **given)

    def plan(self, task, config: FixedConfig, counts: Counts) -> FixedPlan:
        self.seen.append((config, counts))
        return FixedPlan(task, config, counts)

    def rebuild(self, task, stored: Stored) -> FixedPlan:
        raise NotImplementedError  # the evaluation never rebuilds

    def summary(self, stored: Stored) -> tuple[str | None, int]:
        return None, 0


@pytest.fixture
def fixed() -> Iterator[FixedMethod]:
    """The method, registered for one test only."""
    with registry.registered(FixedMethod()) as method:
        yield method


def _fixed_prompts(backend: EvalFake, topic: str) -> list[list[int]]:
    """The ICL prompts the backend scored that carry the fixed method's demonstrations."""
    wanted = backend.tokenize(f"a question about {topic}")
    scored = [p for call in backend.calls if call[0] == "icl" for p in call[1]]
    return [p for p in scored if any(p[i : i + len(wanted)] == wanted for i in range(len(p)))]


def test_a_registered_method_runs_through_run_experiment(fixed):
    train, test = _records()
    config = ExperimentConfig(
        seeds=(0, 1),
        epsilons=(2.0, 8.0),
        methods=("fixed",),
        shots=3,
        params={"topic": "rivers", "M": 2},  # M: no parameter of "fixed", not passed to it
        baselines=False,
    )
    backend = EvalFake(marker="Question:")
    runs = run_experiment(TREC, train, test, backend, config)
    assert [r.setting for r in runs] == ["zero-shot", "fixed@2", "fixed@2", "fixed@8", "fixed@8"]
    # configured with the job's fields and its own parameter; planned from a release of the
    # training set's counts, drawn for the run at 5% of its target (the job gets the rest)
    assert [(c.epsilon, c.shots, c.seed, c.topic) for c, _ in fixed.seen] == [
        (0.95 * 2.0, 3, 0, "rivers"), (0.95 * 2.0, 3, 1, "rivers"),
        (0.95 * 8.0, 3, 0, "rivers"), (0.95 * 8.0, 3, 1, "rivers"),
    ]  # fmt: skip
    exact = partition_sizes(TREC, train)
    for (config, counts), target in zip(fixed.seen, (2.0, 2.0, 8.0, 8.0), strict=True):
        release = counts.release
        assert release is not None and not counts.declared_public and counts.public == 0
        assert set(release.noisy) == set(exact) and release.noisy != exact  # noise was added
        assert release.epsilon == pytest.approx(0.05 * target)
        assert counts.labels == release.estimates()  # the plan saw estimates only
        assert config.delta == pytest.approx(0.95 * DEFAULT_DELTA)
    # each seed draws its own release (from the seed, in a seeded run)
    assert fixed.seen[0][1].release.noisy != fixed.seen[1][1].release.noisy
    released = [{"label": label, "text": "a question about rivers"} for label in TREC.labels[:3]]
    prompt = demonstration_prompt(TREC, [(d["label"], d["text"]) for d in released])
    score = evaluate(EvalFake(marker="Question:"), TREC, prompt, test)
    for run in runs[1:]:
        assert run.kind == run.method == "fixed"
        assert run.demonstrations == released
        # the job's epsilon plus its count release's: the whole target, no more
        assert run.epsilon_charged == pytest.approx(run.epsilon_target, rel=1e-12)
        assert (run.accuracy, run.calibrated_accuracy) == (
            score.accuracy,
            score.calibrated_accuracy,
        )
    # each fixed run scored its own release: the test queries and the content-free inputs
    assert len(_fixed_prompts(backend, "rivers")) == 4 * (len(test) + 3)


def test_the_registered_method_has_its_title_and_no_baselines_of_its_own(fixed):
    grid = settings_grid([4.0], ["fixed"])
    assert [s.key for s in grid] == [
        "zero-shot",
        "instruction-only",
        "fixed@4",
        "noise-free",
        "real",
    ]
    assert grid[2].title == "Fixed demonstrations, ε = 4"
    assert grid[1].method == "adadpsyn"  # "fixed" declares no epsilon = 0 baseline


def _invoke(tmp_path, monkeypatch, *extra: str):
    from app.cli import app

    monkeypatch.setattr("app.cli.eval.load_split", lambda dataset, data_dir: _records())
    backend = EvalFake(marker="Question:")
    monkeypatch.setattr("app.cli.eval.make_backend", lambda kind, model, url, dtype: backend)
    args = ["eval", "--dataset", "trec", "--seeds", "1", "--epsilons", "8", "--no-baselines"]
    result = CliRunner().invoke(app, [*args, "--out-dir", str(tmp_path), *extra])
    return result, backend


def test_dpsyn_eval_runs_a_registered_method_with_its_parameter(fixed, tmp_path, monkeypatch):
    result, backend = _invoke(tmp_path, monkeypatch, "--methods", "fixed", "--param", "topic=lakes")
    assert result.exit_code == 0, result.output
    assert "| Fixed demonstrations, ε = 8 |" in (tmp_path / "results.md").read_text()
    runs = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert [r["setting"] for r in runs] == ["zero-shot", "fixed@8"]
    assert {d["text"] for d in runs[1]["demonstrations"]} == {"a question about lakes"}
    assert _fixed_prompts(backend, "lakes")  # the release was scored
    assert [c.topic for c, _ in fixed.seen] == ["lakes"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--methods", "fixed", "--param", "teachers=3"], "--param teachers: none of --methods"),
        (["--methods", "fixed", "--param", "topic"], "--param takes NAME=VALUE"),
        (["--methods", "nope"], "fixed"),  # the registered methods are listed
    ],
)
def test_dpsyn_eval_refuses_what_no_method_asked_for_takes(
    fixed, tmp_path, monkeypatch, extra: Sequence[str], message: str
):
    result, backend = _invoke(tmp_path, monkeypatch, *extra)
    assert result.exit_code == 2 and message in result.output
    assert backend.calls == [] and not fixed.seen  # refused before the model or a plan ran
