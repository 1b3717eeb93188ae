"""``dpsyn advise`` and :mod:`app.eval.advice`: candidates run on a public set as if it were
private, beside zero-shot, and a recommendation that says when not to spend."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import app.cli.advise as advise_cli
from app.api.schemas import ValidationBaselines, validation_outcome
from app.cli import app
from app.eval.advice import (
    Advice,
    AdviceConfig,
    Candidate,
    advise,
    planned_runs,
    recommend,
    split,
)
from app.eval.verdict import Outcome
from app.synthesis.data import Record
from app.synthesis.tasks import BUILTIN_TASKS
from tests.eval.test_experiment import EvalFake

TREC = BUILTIN_TASKS["trec"]
WORDS = [
    ("abbreviation", "Abbreviation"), ("entity", "Entity"), ("description", "Description"),
    ("person", "Person"), ("location", "Location"), ("number", "Number"),
]  # fmt: skip


def _public_set() -> list[Record]:
    return [Record(f"question {i} about {w}", label) for i in range(10) for w, label in WORDS]


def test_the_split_is_fixed_disjoint_and_keeps_most_records():
    records = _public_set()
    standin, queries = split(records, 100)
    assert len(queries) == len(records) // 4 and len(standin) == len(records) - len(queries)
    assert {r.text for r in standin}.isdisjoint(r.text for r in queries)
    assert split(records, 100) == (standin, queries)
    with pytest.raises(ValueError, match="at least 8"):
        split(records[:5], 100)


def _c(method: str, epsilon: float, accs: tuple[float, ...], shots: int = 4) -> Candidate:
    return Candidate(method, shots, epsilon, accs)


def test_the_recommendation_is_the_smallest_epsilon_that_clearly_beats_zero_shot():
    candidates = [
        _c("tang", 1, (0.50, 0.62, 0.56)),  # ahead on average, not by one SE over 0.55
        _c("adadpsyn", 1, (0.40, 0.42, 0.41)),
        _c("tang", 4, (0.70, 0.72, 0.71)),
        _c("adadpsyn", 4, (0.74, 0.76, 0.75)),
        _c("adadpsyn", 8, (0.90, 0.91, 0.92)),  # better, but at a larger epsilon
    ]
    chosen = recommend(candidates, zero_shot=0.55)
    assert chosen is not None and (chosen.method, chosen.epsilon) == ("adadpsyn", 4)
    assert recommend(candidates, zero_shot=0.95) is None  # nothing beats it: do not spend


def test_a_verdict_needs_two_seeds_both_baselines_and_the_query_sample():
    """Issue 43: one seed "beat" the majority label it only tied (41.7% each, "± 0.0 %")."""
    one_seed = _c("tang", 1, (0.90,))
    assert not one_seed.beats(0.417) and recommend([one_seed], zero_shot=0.1) is None
    tie = _c("tang", 1, (0.417, 0.418, 0.416))
    assert recommend([tie], zero_shot=0.2, majority=0.417) is None  # the majority label
    assert recommend([tie], zero_shot=0.2) is tie
    # 60 queries: a 10-point lead over zero-shot is inside the queries' own noise
    few = Candidate("tang", 4, 1.0, (0.60, 0.61, 0.60), n_queries=60)
    assert few.se > 0.06 and not few.beats(0.50)
    many = Candidate("tang", 4, 1.0, (0.60, 0.61, 0.60), n_queries=5000)
    assert many.beats(0.50)


def test_a_verdict_that_cannot_tell_says_what_measurement_would():
    """Item 1 of the verdicts issue: "cannot tell" states the queries and seeds at which the
    lead, if it held, would be two standard errors; a candidate short of the better baseline
    within the noise is told it cannot be told from it, and that it has no lead to confirm."""
    close = Candidate("tang", 4, 1.0, (0.58, 0.62, 0.60), n_queries=100)
    assert not close.beats(0.55)
    queries, seeds = close.to_tell(0.55) or (0, 0)
    scaled = Candidate("tang", 4, 1.0, (0.58, 0.62, 0.60) * (seeds // 3 + 1), n_queries=queries)
    assert scaled.mean - 2 * scaled.se > 0.55 - 1e-9  # the advice's own bar, at that size
    assert queries > 100 and seeds >= 3
    advice = Advice(
        "trec", 60, 100, zero_shot=0.55, majority=0.3, candidates=(close,), recommended=None
    )
    assert f"would take about {queries} queries and {seeds} seeds to tell" in advice.summary()
    short = Candidate("tang", 4, 1.0, (0.50, 0.52, 0.51), n_queries=100)
    assert short.to_tell(0.55) is None
    advice = Advice(
        "trec", 60, 100, zero_shot=0.55, majority=0.3, candidates=(short,), recommended=None
    )
    # -4 points with ±10 of noise: not behind as a fact (issue 55), and no win either
    assert short.against(0.55).outcome is Outcome.CANNOT_TELL
    assert "cannot tell it from the better baseline (55.0%; -4.0% against a margin of ±10.1%)" in (
        advice.summary()
    )
    assert "it measured no lead over it for more data to confirm" in advice.summary()


def test_a_candidate_behind_beyond_the_margin_is_told_so():
    behind = Candidate("tang", 4, 1.0, (0.30, 0.32, 0.31), n_queries=100)
    assert behind.against(0.55).outcome is Outcome.BEHIND and not behind.beats(0.55)
    advice = Advice(
        "trec", 60, 100, zero_shot=0.55, majority=0.3, candidates=(behind,), recommended=None
    )
    assert "behind the better baseline (55.0%) by more than two standard errors" in (
        advice.summary()
    )
    assert advice.to_dict()["candidates"][0]["verdict"] == "behind"


def test_advice_and_validation_give_one_verdict_on_the_same_numbers():
    """Issue 55: the advice's verdict and a prompt's validation verdict come from one function:
    on 48 queries with no spread over seeds, the same accuracies get the same outcome."""
    baselines = ValidationBaselines(zero_shot=0.458, majority=0.25, majority_label="a")
    for accuracy, outcome in ((0.396, "cannot_tell"), (0.292, "behind"), (0.9, "ahead")):
        same = Candidate("tang", 4, 1.0, (accuracy, accuracy), n_queries=48)
        advice = Advice("t", 60, 48, zero_shot=0.458, majority=0.25, candidates=(same,),
                        recommended=recommend([same], 0.458, 0.25))  # fmt: skip
        assert advice.to_dict()["candidates"][0]["verdict"] == outcome
        assert validation_outcome(accuracy, baselines, 48) == outcome
        assert same.beats(0.458) is (outcome == "ahead") is (advice.recommended is same)


def test_default_shots_show_every_label_of_a_many_label_task():
    assert AdviceConfig().shot_counts(BUILTIN_TASKS["sst2"]) == (4,)
    assert AdviceConfig().shot_counts(TREC) == (4, 6)
    assert AdviceConfig().shot_counts(BUILTIN_TASKS["trec14"]) == (4, 14)
    assert AdviceConfig(shots=(2, 8)).shot_counts(TREC) == (2, 8)
    with pytest.raises(ValueError, match="finite"):
        AdviceConfig(epsilons=(0.0,))


def test_advice_runs_every_candidate_beside_the_baselines():
    config = AdviceConfig(shots=(2, 6), epsilons=(1.0, 4.0), seeds=2, params={"tmax": 3, "K": 8})
    result = advise(TREC, _public_set(), EvalFake(), config)
    keys = {(c.method, c.shots, c.epsilon) for c in result.candidates}
    assert keys == {(m, s, e) for m in ("adadpsyn", "tang") for s in (2, 6) for e in (1.0, 4.0)}
    assert all(len(c.accuracies) == 2 for c in result.candidates)
    assert result.n_standin + result.n_queries == 60 and result.n_queries == 15
    assert 0.0 <= result.zero_shot <= 1.0 and result.majority is not None
    assert sum(r.kind == "zero-shot" for r in result.runs) == 1  # scored once, not per shots
    body = result.to_dict()
    assert body["summary"] == result.summary() and len(body["candidates"]) == 8
    json.dumps(body)  # JSON-ready


def test_the_command_prints_the_table_and_a_recommendation(tmp_path, monkeypatch):
    path = tmp_path / "public.csv"
    path.write_text(
        "text,label\n" + "".join(f"{r.text},{r.label}\n" for r in _public_set()), encoding="utf-8"
    )
    monkeypatch.setattr(advise_cli, "make_backend", lambda *a, **k: EvalFake())
    args = ["advise", "--data", str(path), "--task", "trec", "--shots", "2", "--seeds", "2"]
    args += ["--epsilons", "2", "--param", "tmax=3", "--param", "K=8"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "zero-shot" in result.output and "| tang | 2 | 2 |" in result.output
    assert "| against the baselines |" in result.output  # ahead, behind or cannot tell
    assert ("Recommended:" in result.output) != ("No candidate clearly beats" in result.output)
    as_json = CliRunner().invoke(app, [*args, "--json"])
    assert json.loads(as_json.stdout)["n_queries"] == 15


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "give one of --dataset"),
        (["--dataset", "nope"], "--dataset must be one of"),
        (["--dataset", "trec", "--epsilons", "0"], "--epsilons values must be finite"),
        (["--dataset", "trec", "--methods", "nope"], "nope"),
        (["--dataset", "trec", "--shots", "x"], "--shots takes"),
    ],
)
def test_bad_input_is_refused_before_any_model_loads(extra, message, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("the model must not load")

    monkeypatch.setattr(advise_cli, "make_backend", no_model)
    result = CliRunner().invoke(app, ["advise", *extra])
    assert result.exit_code != 0
    assert message in result.output


def test_advice_says_what_it_measured_that_a_job_would_not():
    """Issue 43: advice ran T_max 8 / K 50 where a job runs the task's T_max and K 100, and
    did not say so. The note names both and the flags that measure the job's own shape;
    measuring that shape needs no note."""
    quick = AdviceConfig(methods=("tang",))
    assert quick.shape(TREC) == {"M": 20, "tmax": 8, "K": 50}
    note = quick.shape_note(TREC)
    assert note is not None
    assert "Measured at T_max 8, K 50" in note and "runs at T_max 15, K 100 by default" in note
    assert "--param tmax=15 --param K=100" in note
    own = AdviceConfig(methods=("tang",), params={"tmax": 15, "K": 100})
    assert own.shape_note(TREC) is None
    config = AdviceConfig(shots=(2,), epsilons=(2.0,), seeds=2, params={"tmax": 3, "K": 8})
    result = advise(TREC, _public_set(), EvalFake(), config)
    assert result.summary().endswith(config.shape_note(TREC) or "no note")
    assert result.to_dict()["shape_note"] == config.shape_note(TREC)


def test_advice_states_its_runs_before_and_an_estimate_after_each_run():
    lines: list[str] = []
    config = AdviceConfig(shots=(2,), epsilons=(1.0, 4.0), seeds=2, params={"tmax": 3, "K": 8})
    advise(TREC, _public_set(), EvalFake(), config, log=lines.append)
    assert lines[0].startswith("advice: 9 runs (2 method(s) x 2 ε x 2 seed(s) x 1 shot count(s)")
    assert "M 20, T_max 3, K 8" in lines[0]
    # after zero-shot's line: a range, said to be a guess until a prompt run is measured
    assert lines[1].startswith("[1/9] zero-shot")
    assert lines[2].startswith("the rest about ") and "–" in lines[2] and "a guess" in lines[2]
    assert lines[2].endswith(
        "(8 runs): a guess from zero-shot's time until a prompt run is measured"
    )
    # after the first prompt run: from its measured time, no longer a guess
    rest = [line for line in lines[3:] if line.startswith("the rest")]
    assert rest and "guess" not in rest[0] and rest[-1].endswith("(1 run)")
    # the plan the estimate prices grows with the work: twice the seeds, twice the runs
    one = planned_runs(TREC, config)
    two = planned_runs(TREC, config.model_copy(update={"seeds": 4}))
    assert len(two) - 1 == 2 * (len(one) - 1)
    longer = planned_runs(TREC, config.model_copy(update={"params": {"tmax": 30, "K": 8}}))
    assert longer[1].size == pytest.approx(10 * one[1].size)


def test_advise_reads_data_as_synthesize_does(tmp_path, monkeypatch):
    """A headerless file with numbered labels: --labels, --label-map and column numbers, as
    ``dpsyn synthesize`` takes them (issue 43: a spec file and a rewritten CSV were needed)."""
    path = tmp_path / "tickets.csv"
    rows = [f"{1 + i % 2},ticket {i} about {('billing', 'login')[i % 2]} issue" for i in range(48)]
    path.write_text("\n".join(rows) + "\n")
    monkeypatch.setattr(advise_cli, "make_backend", lambda *a, **k: EvalFake())
    args = ["advise", "--data", str(path), "--label-map", "1=billing,2=login"]
    args += ["--text-field", "Question", "--label-field", "Type"]  # what the fake model reads
    args += ["--text-col", "2", "--label-col", "1", "--methods", "tang", "--shots", "2"]
    args += ["--seeds", "2", "--epsilons", "2", "--param", "tmax=3", "--param", "K=8", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["n_standin"] + body["n_queries"] == 48
    wrong = CliRunner().invoke(app, [*args[:4], "1=billing,3=login", *args[5:]])
    # the map of another numbering: refused as synthesize refuses it, before any model loads
    assert wrong.exit_code == 2 and "24 of 48 records" in wrong.output
