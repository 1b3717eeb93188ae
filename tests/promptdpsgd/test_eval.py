"""``dpsyn eval --methods promptdpsgd``: each epsilon and seed trains a soft prompt and scores
the test queries through it (tiny model: the plumbing, not the accuracy)."""

from __future__ import annotations

import pytest

from app.eval.experiment import ExperimentConfig, run_experiment, settings_grid
from app.promptdpsgd.backend import GradientAccessError
from app.synthesis.data import Record
from app.synthesis.tasks import BUILTIN_TASKS
from tests.promptdpsgd.test_train import records
from tests.promptdpsgd.tiny import tiny_backend
from tests.synthesis.fake_backend import FakeBackend

SST2 = BUILTIN_TASKS["sst2"]
CONFIG = ExperimentConfig(
    seeds=(0, 1),
    test_size=6,
    epsilons=(8.0,),
    methods=("promptdpsgd",),
    calibrated=False,
    params={"steps": 2, "batch_size": 4, "prompt_length": 2},
    baselines=False,
)


def test_the_grid_without_baselines_is_zero_shot_and_the_methods():
    grid = settings_grid((1.0, 8.0), ("promptdpsgd",), baselines=False)
    assert [s.key for s in grid] == ["zero-shot", "promptdpsgd@1", "promptdpsgd@8"]
    assert "noise-free" in [s.key for s in settings_grid((1.0,), ("promptdpsgd",))]


def test_each_seed_trains_its_own_soft_prompt_and_is_scored_through_it():
    train, test = records(40, seed=1), records(6, seed=2)
    runs = run_experiment(SST2, train, test, tiny_backend(), CONFIG)
    assert [r.setting for r in runs] == ["zero-shot", "promptdpsgd@8", "promptdpsgd@8"]
    trained = runs[1:]
    for run in trained:
        assert run.kind == "promptdpsgd" and run.n_test == 6
        assert 8.0 * 0.99 <= run.epsilon_charged <= 8.0
        (info,) = run.demonstrations
        assert info["length"] == 2 and info["steps"] == 2
    # different seeds: different noise, different soft prompts
    assert (
        trained[0].demonstrations[0]["soft_prompt_sha256"]
        != (trained[1].demonstrations[0]["soft_prompt_sha256"])
    )
    # no record text in what a run keeps
    assert not any(r.text in str(run) for r in train for run in runs)


def test_a_backend_without_gradients_is_refused():
    train: list[Record] = records(40)
    with pytest.raises(GradientAccessError):
        run_experiment(SST2, train, records(6), FakeBackend(marker="Review:"), CONFIG)


def test_the_audit_attacks_soft_prompts_trained_on_member_subsets():
    from app.eval.audit import AuditConfig, MethodAttack, run_audit

    attack = MethodAttack("promptdpsgd", 2, {"steps": 2, "batch_size": 3})
    config = AuditConfig(trials=0, attacks=(attack,), members=6, epsilon=8.0)
    seen = []
    out = run_audit(SST2, records(60, seed=4), tiny_backend(), config, lambda *a: seen.append(a))
    summary = out["promptdpsgd"]
    assert seen == [("promptdpsgd", 1, 2), ("promptdpsgd", 2, 2)]
    for trial in summary.trials:
        assert len(trial.member_scores) == len(trial.non_member_scores) == 6
        assert 0.0 <= trial.auc <= 1.0
    assert summary.extra["epsilon_spent_max"] <= 8.0
    assert "promptdpsgd" in summary.to_dict()["name"]
