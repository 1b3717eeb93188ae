"""run_pate end to end with the fake backend: Confident-GNMax, the filter, progress, privacy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.pate.config import PateConfig, PateError
from app.pate.plan import plan_pate
from app.pate.run import run_pate
from app.privacy.unit import DEFAULT_DELTA
from tests.pate.fake_backend import PateFakeBackend
from tests.pate.helpers import SECRET, SST2, private_records, public_inputs

PRIVATE = private_records(400)  # 40 teachers, 10 records each: every teacher votes
PUBLIC = public_inputs(good=12, bad=12, mixed=12)


def _config(**overrides: object) -> PateConfig:
    # 40 teachers: "good"/"bad" inputs get 40 votes, "mixed" ones about 20 each way, so a
    # threshold of 32 votes with noise std 2 separates them (both margins are >= 4 std).
    fields: dict[str, object] = {
        "epsilon": 100.0,
        "teachers": 40,
        "threshold_fraction": 0.8,
        "sigma_threshold": 2.0,
        "sigma_gnmax": 2.0,
        "student_shots": 2,
        "candidates": 4,
        "group_size": 8,
        "seed": 3,
    }
    fields.update(overrides)
    return PateConfig(**fields)  # type: ignore[arg-type]


def _run(config: PateConfig, public=PUBLIC, backend=None, **kwargs):
    backend = backend or PateFakeBackend()
    plan = plan_pate(SST2, len(PRIVATE), len(public), config)
    return run_pate(SST2, PRIVATE, public, plan, backend, **kwargs), plan, backend


def _query(prompt: str) -> str:
    """The public input at the end of a detokenised fake prompt."""
    return prompt.split("Review: ")[-1].removesuffix(" \n Sentiment:")


def _expected_label(text: str) -> str:
    return "positive" if "good" in text else "negative"


def test_consensus_is_answered_and_split_votes_are_rejected():
    result, plan, _ = _run(_config())
    stats = result.stats
    assert "teachers_voting" not in stats  # how many shares are full is not a DP output
    assert (stats["processed"], stats["answered"], stats["rejected"]) == (36, 24, 12)
    assert not stats["budget_exhausted"]
    assert result.method == "promptpate" and result.model == "fake-pate"
    assert len(result.demonstrations) == 2
    for demo in result.demonstrations:
        assert "mixed" not in demo.text
        assert demo.label == _expected_label(demo.text)
    assert stats["holdout_accuracy"] == 1.0
    assert result.prompt.startswith(SST2.icl_instruction)
    assert result.epsilon == pytest.approx(plan.epsilon()) and result.epsilon <= 100.0
    assert result.delta == DEFAULT_DELTA  # public, never 1/n_private (issue 32)
    assert result.event == {"type": "pate", "noise_multiplier": 1 / plan.privacy.budget_mu,
                            "relation": "add_or_remove"}  # fmt: skip
    assert result.plan["n_public"] == 36 and result.plan["config"]["teachers"] == 40


def test_a_large_threshold_rejects_everything_and_the_student_fails_with_counts():
    with pytest.raises(PateError, match=r"only 0 public input\(s\) were labelled") as info:
        _run(_config(threshold_fraction=1.0, sigma_threshold=0.5, sigma_gnmax=0.5),
             public=public_inputs(good=0, bad=0, mixed=10))  # fmt: skip
    assert SECRET not in str(info.value)


def test_the_filter_stops_the_run_when_the_budget_is_spent():
    result, plan, _ = _run(_config(epsilon=12.0))
    stats = result.stats
    agg = plan.privacy.aggregator
    spent_sq = stats["answered"] * agg.mu_query**2 + stats["rejected"] * agg.mu_threshold**2
    assert stats["budget_exhausted"]
    assert 0 < stats["processed"] < 36
    assert stats["processed"] == stats["answered"] + stats["rejected"]
    assert stats["spent_mu"] ** 2 == pytest.approx(spent_sq)
    assert stats["budget_mu"] == pytest.approx(plan.privacy.budget_mu)
    assert spent_sq <= plan.privacy.budget_mu**2 * (1 + 1e-9)
    # stopped because one more full query (check and release) would not fit
    assert spent_sq + agg.mu_query**2 > plan.privacy.budget_mu**2


def test_progress_is_reported_per_group_and_its_exception_stops_the_job():
    seen: list[tuple[int, int]] = []
    _run(_config(), progress=lambda done, total: seen.append((done, total)))
    # After each group of 8 inputs, and within it as the 40 teachers' calls come in (one
    # input's worth of votes per 5 teachers): never 0 for a whole group, never backwards.
    assert seen == [(n, 36) for n in range(1, 37)]

    class CancelledError(Exception):
        pass

    def cancel(done: int, total: int) -> None:
        if done >= 16:
            raise CancelledError

    backend = PateFakeBackend()
    with pytest.raises(CancelledError):
        _run(_config(), backend=backend, progress=cancel)
    assert len(backend.calls) == 2 * 40  # two groups of teacher calls, no student calls


def test_no_private_text_reaches_the_result_or_the_student_prompts():
    result, _, backend = _run(_config())
    assert SECRET not in json.dumps(result.to_dict())
    teacher_calls, student_calls = backend.calls[:-4], backend.calls[-4:]
    assert len(teacher_calls) == 5 * 40
    assert all(SECRET in prompt for call in teacher_calls for prompt in call)
    assert not any(SECRET in prompt for call in student_calls for prompt in call)


def test_public_inputs_are_shuffled_capped_and_cut():
    long_inputs = [f"a good film {'really ' * 30}number {i}" for i in range(30)]
    long_inputs += [f"a bad film {'truly ' * 30}number {i}" for i in range(30)]
    result, plan, backend = _run(_config(max_public=12, max_chars=40), public=long_inputs)
    assert plan.n_public == 12 and result.stats["processed"] == 12
    queried = {_query(p) for p in backend.calls[0]}
    assert all(len(q) <= 40 for q in queried)
    # a shuffle, not the first 12 in file order (which are all "good")
    assert any("bad" in q for q in queried)
    assert all(len(d.text) <= 40 for d in result.demonstrations)


def test_a_seed_or_a_given_generator_makes_the_run_repeatable():
    a, _, _ = _run(_config())
    b, _, _ = _run(_config())
    assert a.demonstrations == b.demonstrations
    c, _, _ = _run(_config(seed=None), rng=np.random.default_rng(7))
    d, _, _ = _run(_config(seed=None), rng=np.random.default_rng(7))
    assert c.demonstrations == d.demonstrations


def test_public_data_that_changed_since_planning_is_refused():
    """The plan fixed how many public inputs the job processes: fewer is refused. The
    private records are not checked here (the plan knows no private count unless it was
    declared public; the worker checks the dataset against its row, issue 41): a run on one
    record fewer is the run of its neighbour."""
    plan = plan_pate(SST2, len(PRIVATE), len(PUBLIC), _config())
    with pytest.raises(PateError, match="public data changed since the job was planned"):
        run_pate(SST2, PRIVATE, PUBLIC[:-1], plan, PateFakeBackend())
    fewer = run_pate(SST2, PRIVATE[:-1], PUBLIC, plan, PateFakeBackend())
    assert fewer.stats["processed"] == plan.n_public
