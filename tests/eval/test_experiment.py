"""The evaluation grid end to end with a fake backend, its outputs, and one real smoke run."""

from __future__ import annotations

import inspect
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from app.eval import datasets
from app.eval.experiment import (
    ExperimentConfig,
    Run,
    Setting,
    aggregate,
    pick_test_subset,
    plot,
    read_runs,
    real_demonstrations,
    run_experiment,
    settings_grid,
    write_json,
    write_table,
)
from app.eval.icl import CONTENT_FREE
from app.privacy.unit import COUNT_RELEASE_SHARE
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import BUILTIN_TASKS
from tests.conftest import require_shared_data, shared_data_dir
from tests.synthesis.fake_backend import FakeBackend

TREC = BUILTIN_TASKS["trec"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class EvalFake(FakeBackend):
    """FakeBackend for synthesis; at an ICL answer position ("Type:") it favours the label
    word that occurs in the query line."""

    def next_token_probs(self, prompts, token_sets):
        answer = self.vocab.get("Type:")
        if not prompts or answer is None or prompts[0][-1] != answer:
            return super().next_token_probs(prompts, token_sets)
        self.calls.append(("icl", [list(p) for p in prompts]))
        out = np.ones(token_sets.shape)
        for row, prompt in enumerate(prompts):
            start = max(i for i, t in enumerate(prompt) if t == self.vocab["Question:"])
            query = set(prompt[start:])
            out[row, np.isin(token_sets[row], list(query))] = 10.0
        return out / out.sum(axis=1, keepdims=True)


def _records() -> tuple[list[Record], list[Record]]:
    train = [Record(f"train question {i} about {w}", lab) for i in range(12) for w, lab in [
        ("abbreviation", "Abbreviation"), ("entity", "Entity"), ("description", "Description"),
        ("person", "Person"), ("location", "Location"), ("number", "Number"),
    ]]  # fmt: skip
    test = [
        Record("what is the abbreviation ?", "Abbreviation"),
        Record("which person ?", "Person"),
        Record("which location ?", "Location"),
        Record("what number ?", "Description"),
    ]
    return train, test


def test_settings_grid_has_baselines_methods_and_both_infinities():
    grid = settings_grid([8, 1, 2], ["adadpsyn", "tang"])
    keys = [s.key for s in grid]
    assert keys == [
        "zero-shot",
        "instruction-only",
        "adadpsyn@1", "adadpsyn@2", "adadpsyn@8",
        "tang@1", "tang@2", "tang@8",
        "noise-free", "real",
    ]  # fmt: skip
    assert grid[0].epsilon == 0.0 and grid[1].epsilon == 0.0
    assert math.isinf(grid[-2].epsilon) and grid[-2].method == "adadpsyn"
    assert math.isinf(grid[-1].epsilon) and grid[-1].method is None
    with pytest.raises(ValueError):
        settings_grid([1], ["nope"])
    with pytest.raises(ValueError):
        settings_grid([0], ["tang"])
    # PromptPATE alone: the generating baselines fall back to AdaDPSyn
    only = settings_grid([1], ["promptpate"])
    assert [s.key for s in only] == [
        "zero-shot", "instruction-only", "promptpate@1", "noise-free", "real"
    ]  # fmt: skip
    assert only[1].method == "adadpsyn" and only[3].method == "adadpsyn"


def test_quick_profile():
    quick = ExperimentConfig.quick()
    assert quick.seeds == (0, 1) and quick.test_size == 100
    assert quick.params["tmax"] == 8 and quick.params["K"] == 50 and "M" not in quick.params
    assert quick.params["teachers"] == 30 and quick.params["max_public"] == 100
    assert ExperimentConfig.quick("agnews").params == {**quick.params, "M": 6}
    assert ExperimentConfig.quick("trec").params == quick.params


def test_each_method_takes_the_parameters_it_declares():
    from app.eval.methods import get, params_for

    params = ExperimentConfig.quick().params
    assert params_for(get("tang"), params) == {"tmax": 8, "K": 50}
    assert params_for(get("promptpate"), params) == {
        "teachers": 30, "queries": 40, "max_public": 100, "max_chars": 300, "candidates": 8
    }  # fmt: skip
    assert params_for(get("promptdpsgd"), params) == {}


def test_real_demonstrations_follow_the_label_schedule():
    train, _ = _records()
    picked = real_demonstrations(TREC, train, 4, seed=3)
    assert len(picked) == 4 and len({label for label, _ in picked}) == 4
    assert all(train[i].label == label for label, i in picked)
    assert picked == real_demonstrations(TREC, train, 4, seed=3)


def test_test_subset_is_fixed_and_sized():
    test = [Record(f"q{i}", "Person") for i in range(50)]
    sub = pick_test_subset(test, 10)
    assert len(sub) == 10 and sub == pick_test_subset(test, 10)
    assert pick_test_subset(test, None) == test


def _run(setting: str, kind: str, eps: float, seed: int, acc: float, cal: float | None) -> Run:
    return Run(setting, kind, "adadpsyn", eps, seed, acc, cal, eps, 10, [], 0.1)


def test_aggregate_mean_and_std_per_setting_in_grid_order():
    grid = [Setting("instruction-only", 0.0, "adadpsyn"), Setting("adadpsyn", 1.0, "adadpsyn")]
    runs = [
        _run("adadpsyn@1", "adadpsyn", 1.0, 0, 0.5, 0.6),
        _run("adadpsyn@1", "adadpsyn", 1.0, 1, 0.7, 0.8),
        _run("instruction-only", "instruction-only", 0.0, 0, 0.4, None),
    ]
    rows = aggregate(runs, grid)
    assert [r.setting for r in rows] == ["instruction-only", "adadpsyn@1"]
    assert rows[1].mean == pytest.approx(0.6) and rows[1].std == pytest.approx(0.1)
    assert rows[1].calibrated_mean == pytest.approx(0.7)
    assert rows[1].calibrated_std == pytest.approx(0.1)
    assert rows[0].calibrated_mean is None and rows[0].n_runs == 1


def _check_outputs(out: Path, runs: list[Run], grid: list[Setting]) -> None:
    rows = aggregate(runs, grid)
    table = write_table(rows, out / "results.md", "trec").read_text()
    for setting in grid:
        assert f"| {setting.title} |" in table
    assert "±" in table
    path = write_json(runs, out / "runs.json", {"dataset": "trec"})
    doc = json.loads(path.read_text())  # strict JSON: no Infinity
    assert doc["meta"] == {"dataset": "trec"} and len(doc["runs"]) == len(runs)
    assert read_runs(path) == runs
    png = plot(rows, out / "accuracy_vs_epsilon.png", "trec")
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 1000


def test_run_experiment_with_a_fake_backend_and_all_outputs(tmp_path):
    train, test = _records()
    config = ExperimentConfig(
        seeds=(0, 1),
        test_size=None,
        epsilons=(2.0, 8.0),
        methods=("adadpsyn", "tang"),
        params={"M": 2, "N": 1, "tmax": 4, "K": 10},
    )
    lines: list[str] = []
    backend = EvalFake(marker="Question:")
    runs = run_experiment(TREC, train, test, backend, config, log=lines.append)
    grid = settings_grid(config.epsilons, config.methods)
    assert len(runs) == (len(grid) - 1) * 2 + 1 and len(lines) == len(runs)  # zero-shot once
    assert {r.setting for r in runs} == {s.key for s in grid}
    for run in runs:
        assert run.accuracy == 0.75 and run.n_test == 4  # the label word decides
        assert run.calibrated_accuracy == 0.75
    by_key = {r.setting: r for r in runs if r.seed == 0}
    assert by_key["instruction-only"].epsilon_charged == 0.0
    assert by_key["zero-shot"].demonstrations == [] and by_key["zero-shot"].epsilon_charged == 0
    assert 0 < by_key["adadpsyn@2"].epsilon_charged <= 2.0 + 1e-9
    assert 0 < by_key["tang@8"].epsilon_charged <= 8.0 + 1e-9
    assert math.isinf(by_key["real"].epsilon_charged)
    real = by_key["real"].demonstrations
    assert all(set(d) == {"label", "train_index"} for d in real)  # no record text
    assert all(d["text"] == "w0 w1 w2" for d in by_key["noise-free"].demonstrations)
    for line in lines:  # progress never shows records
        assert "question" not in line and "train" not in line
    # each evaluation is one batched ICL call: 4 queries + 3 content-free inputs
    icl = [c for c in backend.calls if c[0] == "icl"]
    assert len(icl) == len(runs) and all(len(c[1]) == 7 for c in icl)
    _check_outputs(tmp_path, runs, grid)


def test_dataset_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    assert datasets.paths("trec") == (tmp_path / "trec/train.txt", tmp_path / "trec/test.txt")
    assert datasets.paths("mitd", Path("/d"))[1] == Path("/d/mit_movies/test")
    with pytest.raises(ValueError):
        datasets.paths("imdb")
    monkeypatch.delenv("DATA_DIR")
    assert datasets.default_data_dir() == datasets.REPO_ROOT.parent / "shared" / "data"


SHARED = shared_data_dir()


def _recorded_prompt(run: Run, train: list[Record]) -> str:
    """The prompt a run was scored with, rebuilt from what it recorded."""
    pairs = []
    for demo in run.demonstrations:  # real runs record the training index, not the text
        index = demo.get("train_index")
        text = train[index].text if isinstance(index, int) else str(demo["text"])
        pairs.append((str(demo["label"]), text))
    return demonstration_prompt(TREC, pairs)


def _expected_accuracy(backend, prompt: str, queries: list[Record]) -> tuple[float, float]:
    """Accuracy and calibrated accuracy computed here from the model's label probabilities
    (argmax; calibration: divide by the mean content-free distribution), not by app.eval."""
    texts = [q.text for q in queries] + list(CONTENT_FREE)
    probs = label_probabilities(backend, TREC, prompt, texts)
    gold = np.array([TREC.labels.index(q.label) for q in queries])
    plain = probs[: len(queries)]
    fixed = plain / probs[len(queries) :].mean(axis=0)
    return float((plain.argmax(1) == gold).mean()), float((fixed.argmax(1) == gold).mean())


def test_real_model_smoke_run_on_trec(tmp_path, gemma, monkeypatch):
    """Every run's accuracy is the one computed independently for the prompt it recorded, and
    the AdaDPSyn run released what the same job (configure, plan, run) releases.

    The job is the one the experiment ran, caught on its way out of ``run_method`` (with the
    arguments it was called with, checked to be the job this test would have asked for): a
    second run of the same seeded job on the real model, which this test made before, repeats
    the first (a seeded run repeats: the method contract's clause) at the cost of a whole
    AdaDPSyn run."""
    from app.eval import methods as eval_methods
    from app.eval.methods import JobSpec

    require_shared_data(SHARED / "trec" / "train.txt", SHARED / "trec" / "test.txt")
    started = time.perf_counter()
    train, test = datasets.load_split("trec", SHARED)
    backend = gemma  # the session's packaged model (tests/conftest.py)
    params = {"tmax": 3, "K": 30, "M": 5, "N": 1}
    config = ExperimentConfig(
        seeds=(0,), test_size=10, epsilons=(8.0,), methods=("adadpsyn",), shots=2, params=params
    )
    ran: list[tuple[dict, eval_methods.MethodRun]] = []
    real_run_method = eval_methods.run_method

    def caught(*args, **kwargs):
        called = inspect.signature(real_run_method).bind(*args, **kwargs)
        called.apply_defaults()
        job = real_run_method(*args, **kwargs)
        ran.append((dict(called.arguments), job))
        return job

    monkeypatch.setattr(eval_methods, "run_method", caught)
    runs = run_experiment(TREC, train, test, backend, config)
    grid = settings_grid(config.epsilons, config.methods)
    assert [r.setting for r in runs] == [s.key for s in grid]
    queries = pick_test_subset(test, 10)
    for run in runs:
        expected = _expected_accuracy(backend, _recorded_prompt(run, train), queries)
        assert (run.accuracy, run.calibrated_accuracy) == expected, run.setting
        assert run.n_test == 10
    # the AdaDPSyn run at epsilon 8 (the baselines are runs of the method too, at 0 and inf)
    ((called, job),) = [(c, j) for c, j in ran if (c["name"], c["job"].epsilon) == ("adadpsyn", 8)]
    assert list(called.pop("records")) == train
    assert called.pop("backend") is backend
    assert called == {
        "name": "adadpsyn",
        "task": TREC,
        "job": JobSpec(8.0, 2, seed=0),
        "params": params,
        "public": None,
    }
    (private,) = [r for r in runs if r.setting == "adadpsyn@8"]
    assert private.demonstrations == [
        {"label": d.label, "text": d.text} for d in job.result.demonstrations
    ]
    # the run's cost: its job's epsilon plus the count release the run drew for itself, at
    # COUNT_RELEASE_SHARE of the target (issue 41: a local run has no dataset release)
    release = COUNT_RELEASE_SHARE * 8.0
    assert job.plan.epsilon() <= 8.0 - release + 1e-9
    assert private.epsilon_charged == job.result.epsilon
    assert job.result.epsilon == pytest.approx(job.plan.epsilon() + release, rel=1e-12)
    assert 7.0 < private.epsilon_charged <= 8.0 + 1e-9  # calibrated to the target
    _check_outputs(tmp_path, runs, grid)
    elapsed = time.perf_counter() - started
    if os.environ.get("DPSYN_EVAL_TIMING"):
        each = ", ".join(f"{r.setting} {r.seconds:.1f}s" for r in runs)
        print(f"smoke: {elapsed:.1f} s; {each}")


def test_promptpate_setting_runs_a_student_prompt_and_reuses_teacher_votes():
    from app.eval.experiment import MemoBackend, run_one
    from tests.pate.fake_backend import PateFakeBackend
    from tests.pate.helpers import SST2, private_records, public_inputs

    train = private_records(200)
    public = public_inputs(good=15, bad=15, mixed=0)
    test = [Record("a good film", "positive"), Record("a bad film", "negative")]
    config = ExperimentConfig(
        seeds=(0,),
        epsilons=(50.0,),
        methods=("promptpate",),
        shots=2,  # the job's shots: PromptPATE's student prompt
        params={"teachers": 20, "queries": 30, "candidates": 2},
    )
    inner = PateFakeBackend()
    backend = MemoBackend(inner)
    setting = Setting("promptpate", 50.0, "promptpate")
    first = run_one(SST2, train, test, setting, 0, backend, config, public)
    assert 0 < first.epsilon_charged <= 50.0
    assert first.accuracy == 1.0  # the fake's teachers label "good"/"bad" correctly
    assert len(first.demonstrations) == 2
    assert all("secretword" not in str(d["text"]) for d in first.demonstrations)
    hits = backend.hits
    again = run_one(SST2, train, test, setting, 0, backend, config, public)
    assert backend.hits > hits  # the same seed's teacher votes come from memory
    assert again.demonstrations == first.demonstrations
    with pytest.raises(ValueError, match="public inputs"):
        run_one(SST2, train, test, setting, 0, backend, config, None)
