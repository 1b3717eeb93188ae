"""The token loop, checked with a deterministic fake backend."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from contextlib import contextmanager

import numpy as np
import pytest

from app.methods.registry import MethodKind, get_method
from app.methods.token_loop import NOT_REGENERATED, TokenLoopMethodPlan
from app.privacy.accounting import Accounting
from app.privacy.events import FixedSizeSampling, PoissonSampling, from_dict, to_dict
from app.privacy.params import AdaDPSynVariant, Aggregator, adadpsyn_defaults
from app.privacy.planner import TANG as TANG_CANDIDATE
from app.privacy.planner import Candidate, Choice, PlannerShape, choose_at, tang_multiplier
from app.privacy.rng import make_rng
from app.privacy.synthesis import label_schedule
from app.privacy.unit import COUNT_RELEASE_SHARE, DEFAULT_DELTA, CountRelease
from app.results import SynthesisError
from app.synthesis import generator
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import Record
from app.synthesis.generator import plan_synthesis, synthesize
from app.synthesis.tasks import BUILTIN_TASKS
from tests.synthesis.fake_backend import BlankLabelBackend, FakeBackend

TREC = BUILTIN_TASKS["trec"]
MITG = BUILTIN_TASKS["mitg"]


def trec_records(per_label: int = 60) -> list[Record]:
    """Records whose text is one unique word, so prompts reveal exactly which were used."""
    return [
        Record(text=f"rec_{label}_{i}", label=label)
        for label in TREC.labels
        for i in range(per_label)
    ]


def config(**overrides) -> SynthesisConfig:
    """Loop-behaviour tests run without noise (epsilon = inf) unless they are about the cost."""
    base = dict(epsilon=math.inf, M=5, N=2, tmax=6, shots=4, K=20, seed=3)
    base.update(overrides)
    return SynthesisConfig(**base)


def teacher_records(backend: FakeBackend, prompt: list[int]) -> list[str]:
    return [w for w in backend.words(prompt) if w.startswith("rec_")]


def probs_calls(backend: FakeBackend) -> list[list[list[int]]]:
    return [prompts for kind, prompts in backend.calls if kind == "probs"]


@pytest.mark.parametrize("method", list(Aggregator))
def test_consensus_is_generated_and_stops_at_newline(method):
    backend = FakeBackend(stop_after=3)
    result = synthesize(TREC, trec_records(), config(method=method), backend)
    assert [d.text for d in result.demonstrations] == ["w0 w1 w2"] * 4
    assert len(set(d.label for d in result.demonstrations)) == 4  # without replacement
    assert len(probs_calls(backend)) == 4  # 3 words + the newline step, then all stopped


def test_tmax_caps_a_demonstration_that_never_stops():
    """Cut by T_max: the last fragment (which may end inside a word) is dropped, and no
    display mark is added (issue 55: a view marks what it shortens, the stored text is never
    marked); one that stopped keeps every word (the test above)."""
    backend = FakeBackend(stop_after=None)
    result = synthesize(TREC, trec_records(), config(tmax=5), backend)
    expected = [f"w{i}" for i in range(4)]
    assert all(d.text.split() == expected for d in result.demonstrations)


def test_all_teacher_prompts_of_a_step_go_in_one_batch():
    backend = FakeBackend(stop_after=3)
    synthesize(TREC, trec_records(), config(shots=3, M=7), backend)
    assert [len(batch) for batch in probs_calls(backend)] == [3 * 7] * 4


def test_paper_sampling_draws_n_distinct_records_of_the_target_label_per_teacher():
    backend = FakeBackend(stop_after=3)
    result = synthesize(
        TREC,
        trec_records(),
        config(accounting=Accounting.PAPER, M=6, N=3, public_counts=True),
        backend,
    )
    labels = [d.label for d in result.demonstrations]
    for batch in probs_calls(backend):
        for shot, label in enumerate(labels):
            teachers = batch[shot * 6 : (shot + 1) * 6]
            used = [teacher_records(backend, p) for p in teachers]
            assert [len(u) for u in used] == [3] * 6
            flat = [r for u in used for r in u]
            assert len(set(flat)) == len(flat)  # disjoint teacher subsets
            assert all(r.startswith(f"rec_{label}_") for r in flat)


def test_poisson_sampling_is_disjoint_with_the_planned_expected_size():
    backend = FakeBackend(stop_after=None)
    synthesize(TREC, trec_records(per_label=50), config(M=5, N=2, tmax=40, shots=6), backend)
    sizes = []
    for batch in probs_calls(backend):
        for shot in range(6):
            used = [teacher_records(backend, p) for p in batch[shot * 5 : (shot + 1) * 5]]
            flat = [r for u in used for r in u]
            assert len(set(flat)) == len(flat)
            sizes.extend(len(u) for u in used)
    # each teacher gets Binomial(50, 10/50/5) records: mean 2, sd ~1.3; 1200 teachers
    assert np.mean(sizes) == pytest.approx(2.0, abs=0.25)
    assert len(set(sizes)) > 2  # Poisson sizes vary


def test_fresh_subsample_every_step():
    backend = FakeBackend(stop_after=None)
    synthesize(
        TREC,
        trec_records(),
        config(accounting=Accounting.PAPER, tmax=4, public_counts=True),
        backend,
    )
    first_teacher = [teacher_records(backend, batch[0]) for batch in probs_calls(backend)]
    assert len({tuple(t) for t in first_teacher}) > 1


@pytest.mark.parametrize("accounting", list(Accounting))
def test_the_event_charged_is_what_ran(accounting):
    backend = FakeBackend(stop_after=3)
    records = trec_records()
    paper = accounting is Accounting.PAPER  # its fixed-size sampling needs public counts
    # every demonstration served (one cut short by the noise too): the schedule in full
    cfg = config(accounting=accounting, shots=8, epsilon=8.0, public_counts=paper, min_words=1)
    result = synthesize(TREC, records, cfg, backend)
    event = from_dict(result.event)
    counts = Counter(d.label for d in result.demonstrations)
    assert {e.label: e.event.steps for e in event.labels} == {
        label: n * 6 for label, n in counts.items()
    }  # shots x tmax, whatever stopped early
    expected = FixedSizeSampling if accounting is Accounting.PAPER else PoissonSampling
    assert all(isinstance(e.event.sampling, expected) for e in event.labels)
    assert 8.0 * 0.99 <= result.epsilon <= 8.0
    assert result.delta == pytest.approx(DEFAULT_DELTA, rel=1e-9)  # public, never 1/|D|
    # No count release inside the job's event (issue 41): the counts are declared public,
    # or (a local run) released once beside the job at COUNT_RELEASE_SHARE of the target,
    # the job planned for the rest and the result's cost the sum of the two.
    assert {e.count_release for e in event.labels} == {None}
    plan = generator.plan_local(TREC, records, cfg, make_rng(cfg.seed))  # the run's own plan
    assert result.event == to_dict(plan.event())
    release = plan.local_release
    if paper:
        assert release is None and result.epsilon == plan.epsilon()
        # replace-one: a record can move between two labels, so the labels share one
        # multiplier calibrated on the whole job (each alone at the target would exceed it)
        assert len(set(plan.privacy.noise_by_label().values())) == 1
        return
    assert release is not None and not release.id  # a local run's, on no ledger
    assert release.epsilon == pytest.approx(COUNT_RELEASE_SHARE * 8.0)
    assert release.delta == pytest.approx(COUNT_RELEASE_SHARE * DEFAULT_DELTA)
    assert plan.epsilon() <= 8.0 - release.epsilon
    assert result.epsilon == pytest.approx(plan.epsilon() + release.epsilon, rel=1e-12)
    assert plan.planned_sizes == {
        label: release.estimates()[label] for label in plan.charged()
    }  # what the job priced and sampled at: the release's estimates, not the exact 60s


def test_a_paper_accounted_job_needs_public_counts():
    """Fixed-size sampling draws M*N of exactly n records: n must be public (issue 32)."""
    with pytest.raises(SynthesisError, match="public"):
        synthesize(
            TREC, trec_records(), config(accounting=Accounting.PAPER, epsilon=4.0), FakeBackend()
        )


def test_with_released_counts_nothing_planned_reads_the_exact_counts(monkeypatch):
    """Neighbouring datasets (D, D minus one record, D with one record relabelled) whose
    released counts came out equal plan the very same job: schedule, noise per label,
    planner choice, event, epsilon. The release is fixed here (built once, handed to every
    run) because it is the one DP output that may differ between neighbours; the plan reads
    the private counts only through it (issue 41: a plan is given released or declared
    counts, never the exact ones)."""
    records = trec_records()
    removed = records[1:]
    relabelled = [dataclasses.replace(records[0], label="Number"), *records[1:]]
    noisy = {label: 41.0 + i for i, label in enumerate(TREC.labels)}
    release = CountRelease(sigma=3.0, noisy=noisy, epsilon=0.2, delta=5e-8)
    seen = []

    def fixed_release(sizes, declared_public, epsilon, delta, rng):
        seen.append(dict(sizes))
        return release

    monkeypatch.setattr(generator, "local_release", fixed_release)
    cfg = config(method=Aggregator.ADADPSYN, epsilon=4.0, shots=6)
    plans = [
        generator.plan_local(TREC, rs, cfg, make_rng(5)) for rs in (records, removed, relabelled)
    ]
    assert len({str(sizes) for sizes in seen}) == 3  # the exact counts did differ
    first = plans[0]
    assert first.planned_sizes == {label: release.estimates()[label] for label in first.charged()}
    assert len(set(first.privacy.noise_by_label().values())) > 1  # each label its own noise
    for plan in plans[1:]:
        assert (plan.schedule, plan.privacy, plan.planner, plan.delta) == (
            first.schedule,
            first.privacy,
            first.planner,
            first.delta,
        )
        assert plan.event() == first.event() and plan.epsilon() == first.epsilon()
        assert plan.planned_sizes == first.planned_sizes
        assert plan.reported() == first.reported()


def test_the_same_request_plans_the_same_job():
    """Plans are deterministic given the counts (issue 41): the label schedule comes from a
    generator seeded by the job's public config, so an unseeded request planned twice (a
    quote, then the job it admits) gets the same schedule, noise and epsilon to the last
    digit; another config may draw another schedule."""
    sizes = {label: 50 + 9 * i for i, label in enumerate(TREC.labels)}
    cfg = config(method=Aggregator.TANG, epsilon=4.0, shots=3, seed=None)
    a, b = plan_synthesis(TREC, sizes, cfg), plan_synthesis(TREC, sizes, cfg)
    assert (a.schedule, a.privacy, a.planned_sizes) == (b.schedule, b.privacy, b.planned_sizes)
    assert a.epsilon() == b.epsilon()
    schedules = {
        tuple(label_schedule(TREC.labels, 3, generator.schedule_rng(cfg.model_copy(update=u))))
        for u in ({"M": m} for m in range(3, 9))
    }
    assert a.schedule in schedules and len(schedules) > 1  # drawn, and from the config


def test_each_label_is_calibrated_to_its_own_size():
    """Labels are disjoint, so each label's group is held to the job's epsilon on its own
    (issue 41): a larger label takes less noise, every label's own epsilon meets the target,
    and the job's epsilon is the largest of them."""
    sizes = dict(zip(TREC.labels, (30, 60, 120, 240, 480, 960), strict=True))
    cfg = config(method=Aggregator.TANG, epsilon=2.0, shots=6)
    plan = plan_synthesis(TREC, sizes, cfg)
    noise = plan.privacy.noise_by_label()
    assert set(noise) == set(TREC.labels)
    ordered = [noise[label] for label in TREC.labels]
    assert ordered == sorted(ordered, reverse=True) and ordered[0] > 1.5 * ordered[-1]
    accountant = plan.privacy.accountant
    shots = plan.charged()
    own = {
        label: accountant.dataset_epsilon(
            plan.privacy.synthesis_event(sizes, {label: shots[label]}), plan.delta
        )
        for label in TREC.labels
    }
    assert all(2.0 * 0.99 <= value <= 2.0 for value in own.values()), own
    assert plan.epsilon() == pytest.approx(max(own.values()), rel=1e-9)
    # The negative control: one multiplier for all, the smallest label's, costs the larger
    # labels far less than the target (the noise issue 41 removed).
    smallest = plan.privacy.params_for(TREC.labels[0])
    one = plan.privacy.model_copy(update={"label_params": {}, "params": smallest})
    largest = one.synthesis_event(sizes, {TREC.labels[-1]: shots[TREC.labels[-1]]})
    assert accountant.dataset_epsilon(largest, plan.delta) < 0.5 * 2.0


def test_with_released_counts_a_label_without_records_runs_with_empty_teachers():
    """Failing on an empty label would release its exact count (0) without noise."""
    records = [r for r in trec_records() if r.label != "Location"]
    result = synthesize(TREC, records, config(shots=6, epsilon=4.0), FakeBackend(stop_after=2))
    assert "Location" in {d.label for d in result.demonstrations}


def test_instruction_only_baseline_reads_no_private_record_and_costs_nothing():
    backend = FakeBackend(stop_after=2)
    result = synthesize(TREC, trec_records(), config(epsilon=0.0), backend)
    assert result.epsilon == 0.0 and result.event == {"type": "synthesis", "labels": []}
    assert all(not teacher_records(backend, p) for _, prompts in backend.calls for p in prompts)
    assert [d.text for d in result.demonstrations] == ["w0 w1"] * 4


def test_no_noise_baseline_costs_infinity():
    result = synthesize(TREC, trec_records(), config(epsilon=math.inf), FakeBackend(stop_after=2))
    assert result.epsilon == math.inf
    assert [d.text for d in result.demonstrations] == ["w0 w1"] * 4


def test_a_scheduled_label_without_records_is_an_error():
    records = [r for r in trec_records() if r.label != "Location"]
    with pytest.raises(SynthesisError, match="Location"):
        synthesize(TREC, records, config(shots=6), FakeBackend())


def test_a_budget_too_small_for_the_settings_is_an_error():
    """Fixed coverage checks (explicit T) cost more than the budget. (The planner's default
    can always fall back to no checks, which any budget affords with enough noise.)"""
    with pytest.raises(ValueError, match="cannot be met"):
        synthesize(TREC, trec_records(), config(epsilon=0.001, T=2), FakeBackend())


def _planning(monkeypatch: pytest.MonkeyPatch, candidate: Candidate) -> None:
    """Make every job's planner choose ``candidate`` (at the job's own Tang sigma), with no
    simulation (the agreements it reports are then 0)."""

    def choose_at(M: int, K: int, sigma: float) -> Choice:
        return Choice(candidate, sigma, 0.0, 0.0)

    monkeypatch.setattr(generator, "choose_at", choose_at)


def test_with_no_checks_and_no_clip_planned_adadpsyn_is_tangs_job_draw_for_draw(monkeypatch):
    """Where the planner finds that neither a check nor a clip pays, the AdaDPSyn job runs
    Tang's mechanism at Tang's calibrated sigma: same price, same draws, same demonstrations.
    With a clip planned, the price and the multiplier are still Tang's, the mechanism's
    sensitivity is smaller, and the draws land elsewhere."""
    records = trec_records()
    backend = FakeBackend(stop_after=3)
    # The label schedule is public randomness seeded by the job's whole config, the method
    # included (issue 41); fixed here so that both jobs demonstrate the same labels.
    monkeypatch.setattr(generator, "schedule_rng", lambda cfg: np.random.default_rng(cfg.seed))
    noisy = {
        "epsilon": 0.5,
        "M": 4,
        "N": 2,
        "tmax": 6,
        "K": 10,
        "shots": 4,
        "seed": 9,
        "delta": 0.01,
    }
    tang = synthesize(TREC, records, config(method=Aggregator.TANG, **noisy), backend)
    _planning(monkeypatch, TANG_CANDIDATE)
    ada = synthesize(TREC, records, config(method=Aggregator.ADADPSYN, **noisy), backend)
    assert ada.stats["planner_T"] == 0 and ada.stats["planner_clip"] == 0.0
    tang_sigmas = {label: p["sigma"] for label, p in tang.plan["label_params"].items()}
    assert {label: p["sigma1"] for label, p in ada.plan["label_params"].items()} == tang_sigmas
    assert ada.plan["params"]["sigma1"] == tang.plan["params"]["sigma"]
    assert ada.epsilon == tang.epsilon and ada.event == tang.event
    assert [d.text for d in ada.demonstrations] == [d.text for d in tang.demonstrations]
    _planning(monkeypatch, Candidate(0, clip=0.2))
    clipped = synthesize(TREC, records, config(method=Aggregator.ADADPSYN, **noisy), backend)
    assert clipped.stats["planner_clip"] == 0.2 and clipped.plan["params"]["clip"] == 0.2
    clipped_sigmas = {label: p["sigma1"] for label, p in clipped.plan["label_params"].items()}
    assert clipped_sigmas == tang_sigmas
    assert all(p["clip"] == 0.2 for p in clipped.plan["label_params"].values())
    assert clipped.epsilon == tang.epsilon and clipped.event == tang.event
    assert [d.text for d in clipped.demonstrations] != [d.text for d in tang.demonstrations]
    consensus = synthesize(
        TREC, records, config(method=Aggregator.TANG, **{**noisy, "epsilon": math.inf}), backend
    )
    assert [d.text for d in tang.demonstrations] != [d.text for d in consensus.demonstrations]


def test_the_planner_chooses_from_public_inputs_only():
    """Two datasets with the same label counts and different records, run with the same
    seed: their local count releases are the same draws, so they plan the same constants and
    the same public stats. The planner's choice is made once per job, at the median of the
    labels' own Tang multipliers (each from the label's released size), and set at each
    label's multiplier. Explicit constants switch the planner off."""
    records = trec_records()
    other = [
        Record(f"another private question number {i} ?", r.label) for i, r in enumerate(records)
    ]
    cfg = config(method=Aggregator.ADADPSYN, epsilon=4.0)
    jobs = [generator.plan_local(TREC, rs, cfg, make_rng(5)) for rs in (records, other)]
    assert jobs[0].privacy == jobs[1].privacy and jobs[0].planner == jobs[1].planner
    job = jobs[0]
    tang = {
        label: tang_multiplier(
            PlannerShape(
                M=cfg.M,
                K=cfg.K,
                N=cfg.N,
                tmax=cfg.tmax,
                label_sizes={label: job.planned_sizes[label]},
                shots={label: shots},
                epsilon=job.config.epsilon,  # the target less the local release's share
                delta=job.delta,
            )
        )
        for label, shots in job.charged().items()
    }
    choice = choose_at(cfg.M, cfg.K, float(np.median(list(tang.values()))))
    assert job.planner == choice.public_stats()
    for label in job.charged():
        assert job.privacy.params_for(label).T == choice.candidate.T
    assert job.reported()[0] <= 4.0
    explicit = plan_synthesis(
        TREC, job.planned_sizes, config(method=Aggregator.ADADPSYN, epsilon=4.0, T=1)
    )
    assert explicit.planner == {}
    assert {p.T for p in explicit.privacy.label_params.values()} == {1}


@pytest.mark.parametrize("method", list(Aggregator))
def test_noisy_runs_still_follow_a_strong_consensus(method):
    """With many agreeing teachers the private aggregation keeps the consensus token."""
    backend = FakeBackend(stop_after=3)
    result = synthesize(
        TREC, trec_records(per_label=400), config(method=method, epsilon=8.0, M=40), backend
    )
    expected = [f"w{j}" for j in range(3)]
    matches = [d.text.split() == expected for d in result.demonstrations]
    assert sum(matches) >= 3


def test_extraction_targets_come_from_public_candidates_only():
    records = [Record(text=f"rec_{i}", label=f"privategenre{i % 7}") for i in range(80)]
    task = MITG.with_candidates(["comedy", "horror"])
    backend = FakeBackend(stop_after=2, marker="Sentence:")
    result = synthesize(task, records, config(M=4, N=2, shots=4), backend)
    assert sorted(d.label for d in result.demonstrations) == [
        "comedy",
        "comedy",
        "horror",
        "horror",
    ]
    event = from_dict(result.event)
    assert [(e.label, e.event.steps) for e in event.labels] == [("*", 4 * 6)]
    # private slot values appear only inside teacher examples, never as a generation target
    for _, prompts in backend.calls:
        for prompt in prompts:
            words = backend.words(prompt)
            target = words[len(words) - 1 - words[::-1].index("Genre:") + 1]
            assert target in {"comedy", "horror"}


def test_seeded_runs_repeat_and_results_carry_the_plan():
    a = synthesize(TREC, trec_records(), config(seed=11), FakeBackend(stop_after=None))
    b = synthesize(TREC, trec_records(), config(seed=11), FakeBackend(stop_after=None))
    assert a.to_dict()["demonstrations"] == b.to_dict()["demonstrations"]
    assert a.plan["M"] == 5 and a.method == "adadpsyn" and a.model == "fake"
    assert "Answer Type:" in a.prompt and a.prompt.startswith(TREC.icl_instruction)


@pytest.mark.parametrize("variant", list(AdaDPSynVariant))
def test_adadpsyn_runs_the_variant_and_constants_it_is_charged_for(variant):
    """The job's plan carries the variant's constants for M, explicit ones win, and the
    event charged is priced from exactly those (GoodRadius only where it runs)."""
    backend = FakeBackend(stop_after=2)
    cfg = config(method=Aggregator.ADADPSYN, variant=variant, M=10, N=2, sigma2=4.0, epsilon=8.0)
    result = synthesize(TREC, trec_records(), cfg, backend)
    plan = result.plan["params"]
    expected = adadpsyn_defaults(10, variant)  # explicit sigma2: the planner stays out
    assert plan["variant"] == variant.value and plan["T"] == expected["T"]
    assert plan["sigma2"] == 4.0  # explicit beats the table
    mechanisms = from_dict(result.event).labels[0].event.mechanisms
    sigmas = {m.noise_multiplier for m in mechanisms}
    assert (plan["sigma0"] in sigmas) is (variant is AdaDPSynVariant.PAPER)
    assert SynthesisConfig.for_task("trec", epsilon=1.0).variant is AdaDPSynVariant.POOLED


class ScopedBackend(FakeBackend):
    """A fake backend with a job KV scope (``kv_scope``): records when a scope opens, every
    call made through it, and when it closes."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.events: list[str] = []

    @contextmanager
    def kv_scope(self):
        self.events.append("open")
        try:
            yield ScopeView(self)
        finally:
            self.events.append("close")

    def next_token_probs(self, prompts, token_sets):
        self.events.append("unscoped call")
        return super().next_token_probs(prompts, token_sets)


class ScopeView:
    """What ``ScopedBackend.kv_scope`` yields: the backend, with its calls recorded."""

    def __init__(self, backend: ScopedBackend) -> None:
        self._backend = backend

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def next_token_probs(self, prompts, token_sets):
        self._backend.events.append("call")
        return FakeBackend.next_token_probs(self._backend, prompts, token_sets)


@pytest.mark.parametrize("fail", [False, True])
def test_every_job_runs_in_a_kv_scope_closed_however_it_ends(fail):
    # The scope's store holds this job's prompts only, and is freed even when the job fails
    # or is cancelled (progress raises), so no job sees or evicts another's caches.
    backend = ScopedBackend(stop_after=3)

    def progress(done: int, planned: int) -> None:
        if fail:
            raise RuntimeError("cancelled")

    if fail:
        with pytest.raises(RuntimeError):
            synthesize(BUILTIN_TASKS["trec"], trec_records(), config(), backend, progress)
    else:
        synthesize(BUILTIN_TASKS["trec"], trec_records(), config(), backend, progress)
    assert backend.events[0] == "open" and backend.events[-1] == "close"
    assert backend.events.count("open") == backend.events.count("close") == 1
    assert "call" in backend.events and "unscoped call" not in backend.events


def test_the_retry_layer_passes_a_jobs_scope_through():
    from app.llm.retry import RetryingBackend, RetryPolicy

    backend = ScopedBackend(stop_after=3)
    retrying = RetryingBackend(backend, retry=RetryPolicy(sleep=lambda _s: None))
    result = synthesize(BUILTIN_TASKS["trec"], trec_records(), config(), retrying)
    assert backend.events[0] == "open" and backend.events[-1] == "close"
    assert "call" in backend.events and "unscoped call" not in backend.events
    alone = synthesize(BUILTIN_TASKS["trec"], trec_records(), config(), FakeBackend(stop_after=3))
    assert result.demonstrations == alone.demonstrations


def test_the_evaluations_memo_wrapper_passes_a_jobs_scope_through():
    from app.eval.memo import MemoBackend

    backend = ScopedBackend(stop_after=3)
    result = synthesize(BUILTIN_TASKS["trec"], trec_records(), config(), MemoBackend(backend))
    assert backend.events[0] == "open" and backend.events[-1] == "close"
    assert "call" in backend.events and "unscoped call" not in backend.events
    alone = synthesize(BUILTIN_TASKS["trec"], trec_records(), config(), FakeBackend(stop_after=3))
    assert result.demonstrations == alone.demonstrations


class _BrokenRowBackend(FakeBackend):
    """A backend whose first row per call is ``row`` (NaN: a bad forward pass; zeros: a
    model server that returned none of the requested tokens; uniform: the replacement)."""

    def __init__(self, row: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.row = row

    def next_token_probs(self, prompts, token_sets):
        probs = super().next_token_probs(prompts, token_sets)
        K = probs.shape[1]
        probs[0] = {"nan": np.nan, "zeros": 0.0, "uniform": 1.0 / K}[self.row]
        return probs


@pytest.mark.parametrize("method", list(Aggregator))
@pytest.mark.parametrize("row", ["nan", "zeros"])
def test_a_row_that_is_not_a_distribution_counts_as_uniform_and_never_fails_the_job(method, row):
    """Whether a teacher's row is broken depends on the records in its prompt: failing the
    job then (issue 31) would reveal that without noise. The row counts as the uniform
    distribution instead, so the job, noise included, is the one run with that row uniform."""
    cfg = config(method=method, epsilon=4.0)
    broken = synthesize(TREC, trec_records(), cfg, _BrokenRowBackend(row, stop_after=3))
    uniform = synthesize(TREC, trec_records(), cfg, _BrokenRowBackend("uniform", stop_after=3))
    assert [d.text for d in broken.demonstrations] == [d.text for d in uniform.demonstrations]
    assert broken.demonstrations and broken.stats == uniform.stats


class _BlankWords(FakeBackend):
    """The fake backend whose words all read as whitespace: every demonstration is blank."""

    def detokenize(self, ids) -> str:
        return " " * len(ids)


@pytest.mark.parametrize("epsilon", [math.inf, 8.0, 0.0])
def test_a_stop_token_that_wins_the_first_step_does_not_end_the_demonstration(epsilon):
    """The teachers (or, at epsilon 0, the public prompt) want a newline first: a blank
    demonstration takes the best other token instead, then stops when they say so."""
    backend = FakeBackend(stop_after=0)
    # one-word demonstrations (w0) are what this backend writes: served at min_words 1
    cfg = config(epsilon=epsilon, tmax=4, min_words=1)
    result = synthesize(TREC, trec_records(), cfg, backend)
    texts = [d.text for d in result.demonstrations]
    assert len(texts) == 4 and all(t.strip() for t in texts), texts
    assert "empty_demonstrations" not in result.stats
    if math.isinf(epsilon) or epsilon == 0:  # no noise: the best other token is w0, then stop
        assert texts == ["w0"] * 4


def test_without_the_rule_the_first_step_would_stop():
    """Negative control: the same backend's teachers pick the newline first, so the job above
    would have written four empty demonstrations."""
    backend = FakeBackend(stop_after=0)
    marker = (
        backend.vocab["Question:"] if "Question:" in backend.vocab else backend._id("Question:")
    )
    token_set = np.array([backend.vocab[f"w{i}"] for i in range(5)] + [1])
    probs = backend.next_token_probs([[marker]], token_set[None, :])
    assert token_set[int(np.argmax(probs[0]))] == 1  # NEWLINE


def test_a_demonstration_that_stays_blank_is_not_served():
    backend = _BlankWords(stop_after=None)
    result = synthesize(TREC, trec_records(), config(tmax=3), backend)
    assert result.demonstrations == [] and result.stats["empty_demonstrations"] == 4
    from app.methods.registry import MethodKind, get_method

    method = get_method(MethodKind.ADADPSYN)
    assert method.public_stats(result) == {"empty_demonstrations": 4}
    assert "4 demonstration(s) came out empty" in (method.report(result) or "")


@pytest.mark.parametrize("epsilon", [math.inf, 8.0, 0.0])
def test_a_label_whose_candidates_are_all_blank_is_left_out_and_the_notes_say_so(epsilon):
    """The stop token wins every first step; for one label every other candidate is
    whitespace, so its demonstration stays blank to T_max and is left out. The method's notes
    (what the prompt's API record shows) name the label, from the plan's schedule."""
    cfg = config(epsilon=epsilon, tmax=4, shots=len(TREC.labels), seed=3, min_words=1)
    result = synthesize(TREC, trec_records(), cfg, BlankLabelBackend("location"))
    labels = [d.label for d in result.demonstrations]
    assert sorted(labels) == sorted(set(TREC.labels) - {"Location"})
    assert all(d.text.strip() for d in result.demonstrations)
    assert result.stats["empty_demonstrations"] == 1
    plan = generator.plan_local(TREC, trec_records(), cfg, make_rng(cfg.seed))
    method = get_method(MethodKind.TANG)
    notes = method.prompt_notes(TokenLoopMethodPlan(plan).stored(), result.stats, labels)
    assert notes == [
        "1 demonstration of label 'Location' came out empty (only whitespace after T_max "
        "tokens) and was left out; the prompt holds 5 of the 6 planned.",
        "The prompt does not demonstrate label 'Location': every demonstration planned for "
        "it came out empty.",
        NOT_REGENERATED.format(planned=6),  # issue 55: all 6 were charged
    ]
