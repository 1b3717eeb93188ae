"""The membership inference audit: statistics, trials, fake-backend attacks, outputs, smoke."""

from __future__ import annotations

import inspect
import json
import time

import numpy as np
import pytest

from app.eval.audit import (
    AttackSummary,
    AuditConfig,
    MethodAttack,
    TrialResult,
    auc,
    bootstrap_ci,
    curve_auc,
    real_trials,
    roc_points,
    run_audit,
    split_pools,
    write_outputs,
)
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import BUILTIN_TASKS
from tests.conftest import require_shared_data, shared_data_dir
from tests.synthesis.fake_backend import FakeBackend

SST2 = BUILTIN_TASKS["sst2"]
SST2_TRAIN = shared_data_dir() / "sst2" / "stsa.binary.train"


# --- statistics -----------------------------------------------------------------------------


def test_auc_hand_computed_cases():
    assert auc([0.9, 0.8], [0.1, 0.2, 0.3]) == 1.0
    assert auc([0.1], [0.5, 0.9]) == 0.0
    assert auc([0.5, 0.5], [0.5, 0.5, 0.5]) == 0.5
    # pairs: 0.6 beats 0.4 and ties 0.6 (1.5); 0.3 beats none (0): 1.5 / 4
    assert auc([0.6, 0.3], [0.4, 0.6]) == pytest.approx(0.375)
    # one member against three: above one, tied with one, below one
    assert auc([0.5], [0.2, 0.5, 0.8]) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        auc([], [0.1])


def test_roc_points_are_monotone_and_match_the_mann_whitney_auc():
    rng = np.random.default_rng(1)
    members = np.round(rng.normal(1.0, 1.0, 40), 1)  # rounded: many ties
    non = np.round(rng.normal(0.0, 1.0, 60), 1)
    fpr, tpr = roc_points(members, non)
    assert (fpr[0], tpr[0]) == (0.0, 0.0) and (fpr[-1], tpr[-1]) == (1.0, 1.0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    assert curve_auc(fpr, tpr) == pytest.approx(auc(members, non))
    assert roc_points([0.5], [0.5]) == ([0.0, 1.0], [0.0, 1.0])


def test_bootstrap_ci_contains_the_mean_and_narrows_with_more_trials():
    rng = np.random.default_rng(0)
    few = rng.uniform(0.4, 0.9, 10)
    many = rng.uniform(0.4, 0.9, 400)
    low_f, high_f = bootstrap_ci(few, seed=3)
    low_m, high_m = bootstrap_ci(many, seed=3)
    assert low_f <= few.mean() <= high_f
    assert low_m <= many.mean() <= high_m
    assert high_m - low_m < (high_f - low_f) / 2
    assert bootstrap_ci(few, seed=3) == (low_f, high_f)  # seeded


# --- trials ---------------------------------------------------------------------------------


def _records(n_per_label: int = 40) -> list[Record]:
    return [
        Record(f"r{label} item{i} text", label)
        for i in range(n_per_label)
        for label in ("negative", "positive")
    ]


def test_trials_keep_members_and_non_members_disjoint():
    records = [*_records(), Record("rnegative item0 text", "negative")]  # a duplicate text
    pools = split_pools(records, np.random.default_rng(0))
    member_texts = {r.text for r in pools.members}
    held_texts = {r.text for r in pools.held_out}
    assert not member_texts & held_texts
    assert len(member_texts) + len(held_texts) == 80  # duplicate dropped
    for trial in real_trials(SST2, pools, 30, 6, np.random.default_rng(1)):
        assert len(trial.members) == 1 and len(trial.non_members) == 5
        assert len(set(trial.non_members)) == 5
        member = pools.members[trial.members[0]]
        assert member.label == trial.label
        assert all(pools.held_out[i].label == trial.label for i in trial.non_members)


# --- attacks with fake backends -------------------------------------------------------------


class MemoryBackend(FakeBackend):
    """Generates like :class:`FakeBackend`; when scoring a label, favours the true label of a
    query whose text appears in the prompt (memorisation) and is uniform otherwise. With
    ``memorise=False`` it ignores the prompt entirely."""

    def __init__(self, memorise: bool = True) -> None:
        super().__init__(stop_after=3, marker="Review:")
        self.memorise = memorise

    def next_token_probs(self, prompts, token_sets):
        if not any(p and p[-1] == self.vocab["Sentiment:"] for p in prompts):
            return super().next_token_probs(prompts, token_sets)
        out = np.ones(token_sets.shape)
        for row, prompt in enumerate(prompts):
            words = self.words(prompt)
            starts = [i for i, w in enumerate(words) if w == "Review:"]
            query = words[starts[-1] + 1 : -1]
            for start in starts[:-1]:
                end = words.index("Sentiment:", start)
                if self.memorise and words[start + 1 : end] == query:
                    label_id = self.vocab[words[end + 1]]
                    out[row, token_sets[row] == label_id] = 9.0
        return out / out.sum(axis=1, keepdims=True)


def _config(synthetic_trials: int = 2, **overrides) -> AuditConfig:
    """AdaDPSyn's attack, M 3, N 1, T_max 4, K 8, besides the real-prompt one."""
    params = {"M": 3, "N": 1, "tmax": 4, "K": 8, "min_words": 1}  # one-word texts served
    attack = MethodAttack("adadpsyn", synthetic_trials, params)
    base = {"trials": 12, "candidates": 6, "attacks": (attack,), "epsilon": 8.0, "seed": 7}
    return AuditConfig(**{**base, **overrides})


def test_memorising_backend_gives_a_high_real_prompt_auc():
    summaries = run_audit(SST2, _records(), MemoryBackend(), _config(synthetic_trials=0))
    real = summaries["real"]
    assert len(real.trials) == 12
    assert real.mean_auc() == 1.0


def test_backend_ignoring_the_prompt_gives_auc_one_half():
    summaries = run_audit(SST2, _records(), MemoryBackend(memorise=False), _config())
    for summary in summaries.values():
        assert summary.mean_auc() == pytest.approx(0.5)
        low, high = summary.ci()
        assert low <= 0.5 <= high


def test_synthetic_prompts_do_not_contain_members_so_the_attack_fails():
    backend = MemoryBackend()
    summaries = run_audit(SST2, _records(), backend, _config(trials=0, synthetic_trials=3))
    synthetic = summaries["adadpsyn"]
    assert len(synthetic.trials) == 3
    for trial in synthetic.trials:  # M * N members, as many non-members
        assert len(trial.member_scores) == len(trial.non_member_scores) == 3
    assert synthetic.mean_auc() == pytest.approx(0.5)
    assert synthetic.extra["epsilon_spent_max"] <= 8.0 + 1e-6


# --- outputs --------------------------------------------------------------------------------


def test_outputs_are_written(tmp_path):
    summaries = {
        "real": AttackSummary(
            "real",
            [TrialResult([0.9], [0.1, 0.2], 1.0), TrialResult([0.3], [0.1, 0.5], 0.5)],
            seed=0,
            extra={"epsilon": "inf"},
        ),
        "adadpsyn": AttackSummary(
            "adadpsyn", [TrialResult([0.4, 0.6], [0.5, 0.5], 0.5)], seed=0, extra={"epsilon": 8.0}
        ),
    }
    meta = {"dataset": "sst2", "model": "fake", "seed": 0}
    paths = write_outputs(summaries, meta, tmp_path / "out")
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(paths["json"].read_text())
    assert data["dataset"] == "sst2"
    assert data["attacks"]["real"]["per_trial_auc"] == [1.0, 0.5]
    assert data["attacks"]["real"]["auc_mean"] == 0.75
    assert data["attacks"]["adadpsyn"]["roc"]["fpr"][0] == 0.0
    assert "AdaDPSyn" in paths["markdown"].read_text()


def test_cli_writes_the_three_files(tmp_path, monkeypatch):
    import typer
    from typer.testing import CliRunner

    import app.cli.audit as cli

    data = tmp_path / "data" / "sst2"
    data.mkdir(parents=True)
    lines = [f"{i % 2} review number {i} of the set" for i in range(80)]
    (data / "stsa.binary.train").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(cli, "make_backend", lambda kind, model, url, dtype: MemoryBackend())
    app = typer.Typer()
    app.command("audit")(cli.audit_command)
    app.command("other")(lambda: None)
    out = tmp_path / "out"
    args = ["audit", "--data-dir", str(tmp_path / "data"), "--out-dir", str(out), "--trials", "4"]
    args += ["--synthetic-trials", "1", "--candidates", "4", "--M", "2", "--tmax", "3", "--K", "8"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "real: AUC 1.000" in result.output and "review number" not in result.output
    assert {p.name for p in out.iterdir()} == {"audit.json", "audit.md", "roc.png"}
    config = json.loads((out / "audit.json").read_text())["config"]
    assert config["methods"] == {"adadpsyn": {"trials": 1, "M": 2, "tmax": 3, "K": 8}}
    bad = CliRunner().invoke(app, [*args, "--epsilon", "0"])
    assert bad.exit_code == 2
    # a method the audit cannot attack says why, before the model loads
    pate = CliRunner().invoke(app, [*args, "--methods", "promptpate"])
    assert pate.exit_code == 2
    assert "cannot attack method promptpate: it also reads a public dataset" in pate.output
    # an option of a method not attacked, or the job's shots, is refused by name
    other = CliRunner().invoke(app, [*args, "--steps", "3"])
    assert other.exit_code == 2 and "--steps is for promptdpsgd, not adadpsyn" in other.output
    shots = CliRunner().invoke(app, [*args, "--shots", "2"])
    assert shots.exit_code == 2 and "--shots: the audit's prompts are 1-shot" in shots.output
    out_of_bounds = CliRunner().invoke(app, [*args, "--M", "0"])
    assert out_of_bounds.exit_code == 2 and "M" in out_of_bounds.output


# --- one real-model smoke test --------------------------------------------------------------


def _pairs_auc(members: list[float], non_members: list[float]) -> float:
    """The AUC counted pair by pair here (1 for a member above, 1/2 for a tie)."""
    wins = sum(1.0 if m > n else 0.5 if m == n else 0.0 for m in members for n in non_members)
    return wins / (len(members) * len(non_members))


def _true_label_scores(backend, prompt: str, candidates: list[Record]) -> list[float]:
    probs = label_probabilities(backend, SST2, prompt, [c.text for c in candidates])
    return [float(probs[i, SST2.labels.index(c.label)]) for i, c in enumerate(candidates)]


def test_smoke_on_sst2_with_the_packaged_model(capsys, gemma, monkeypatch):
    """Each trial's scores are those of its candidates after the prompt it attacked, rebuilt
    here from the seed: (a) the member's own 1-shot prompt, (b) the prompt AdaDPSyn releases
    when run as a job on the member subset; and each AUC is counted here pair by pair.

    For (b) the job is the one the audit ran, caught on its way out of ``run_method`` with
    the arguments it was called with, which must be the job rebuilt here from the seed (the
    subset's records, the seed drawn, the parameters): running that seeded job again on the
    real model, as this test did before, repeats it (a seeded run repeats: the method
    contract's clause) at the cost of a whole AdaDPSyn run."""
    from app.eval import audit as eval_audit
    from app.eval.audit import _draw
    from app.eval.methods import JobSpec
    from app.synthesis.data import load_dataset

    require_shared_data(SST2_TRAIN)
    records = load_dataset(SST2, SST2_TRAIN)
    attack = MethodAttack("adadpsyn", 1, {"M": 4, "N": 1, "tmax": 4, "K": 30})
    config = AuditConfig(trials=3, candidates=8, attacks=(attack,), epsilon=8.0, seed=0)
    jobs = []
    real_run_method = eval_audit.run_method

    def caught(*args, **kwargs):
        called = inspect.signature(real_run_method).bind(*args, **kwargs)
        called.apply_defaults()
        ran = real_run_method(*args, **kwargs)
        jobs.append((dict(called.arguments), ran))
        return ran

    monkeypatch.setattr(eval_audit, "run_method", caught)
    started = time.perf_counter()
    summaries = run_audit(SST2, records, gemma, config)
    seconds = time.perf_counter() - started
    with capsys.disabled():
        for summary in summaries.values():
            print(f"\n[audit smoke] {summary.name}: AUC {summary.mean_auc():.3f}", end="")
        print(f" ({seconds:.1f} s)")
    rng = np.random.default_rng(config.seed)  # the audit's draws, replayed
    pools = split_pools(records, rng)
    real = real_trials(SST2, pools, 3, 8, rng)
    assert len(summaries["real"].trials) == len(real)
    for trial, result in zip(real, summaries["real"].trials, strict=True):
        member = pools.members[trial.members[0]]
        candidates = [member, *(pools.held_out[i] for i in trial.non_members)]
        expected = _true_label_scores(gemma, demonstration_prompt(SST2, [member]), candidates)
        assert [*result.member_scores, *result.non_member_scores] == pytest.approx(
            expected, rel=1e-6
        )
        assert result.auc == _pairs_auc(result.member_scores, result.non_member_scores)
    # (b): the same draws, the subset's job through the registry, the label it synthesised
    subset = {
        label: _draw(pools.by_label("members")[label], 4, rng, "members") for label in SST2.labels
    }
    subset_records = [pools.members[i] for label in SST2.labels for i in subset[label]]
    delta = 1.0 / (len(pools.members) + len(pools.held_out))
    job = JobSpec(8.0, 1, delta=delta, seed=int(rng.integers(2**31)))
    params = {"M": 4, "N": 1, "tmax": 4, "K": 30}
    ((called, ran),) = jobs  # the one trial's job
    assert list(called.pop("records")) == subset_records
    assert called.pop("backend") is gemma
    assert called == {
        "name": "adadpsyn",
        "task": SST2,
        "job": job,
        "params": params,
        "public": None,
    }
    label = ran.plan.stored().schedule[0]
    members = [pools.members[i] for i in subset[label]]
    non = [pools.held_out[i] for i in _draw(pools.by_label("held_out")[label], 4, rng, "held")]
    (synthetic,) = summaries["adadpsyn"].trials
    scores = _true_label_scores(gemma, ran.result.prompt, [*members, *non])
    assert [*synthetic.member_scores, *synthetic.non_member_scores] == pytest.approx(
        scores, rel=1e-6
    )
    assert synthetic.auc == _pairs_auc(synthetic.member_scores, synthetic.non_member_scores)
    assert summaries["adadpsyn"].extra["epsilon_spent_max"] == ran.result.epsilon
