"""One short real synthesis on shared TREC data with the packaged CPU model."""

from __future__ import annotations

import re
from contextlib import contextmanager, suppress
from threading import Barrier, BrokenBarrierError, Lock, Thread

import pytest

from app.llm.retry import RetryingBackend, RetryPolicy
from app.synthesis.config import SynthesisConfig
from app.synthesis.data import load_dataset
from app.synthesis.generator import synthesize
from app.synthesis.tasks import BUILTIN_TASKS
from tests.conftest import require_shared_data, shared_data_dir

TREC_TRAIN = shared_data_dir() / "trec" / "train.txt"


@pytest.fixture(scope="module")
def backend(gemma):
    return gemma  # the session's packaged model (tests/conftest.py)


def test_short_adadpsyn_run_on_trec_gives_readable_questions(backend):
    require_shared_data(TREC_TRAIN)
    task = BUILTIN_TASKS["trec"]
    records = load_dataset(task, TREC_TRAIN)
    config = SynthesisConfig(epsilon=8.0, shots=2, M=6, N=2, tmax=8, K=50, seed=5)
    result = synthesize(task, records, config, backend)
    assert result.epsilon <= 8.0 and result.model == "gemma-3-270m"
    for demo in result.demonstrations:
        words = demo.text.split()
        assert len(words) >= 3, demo.text
        # readable: mostly ordinary words, not byte soup
        assert sum(bool(re.fullmatch(r"[A-Za-z'?,.-]+", w)) for w in words) >= 0.6 * len(words)
    assert result.stats["backend_calls"] >= 2  # a top-K call and a teacher call per token
    assert "planner_T" in result.stats  # the default pooled variant's constants were planned


@pytest.fixture
def scopes(backend, monkeypatch) -> list:
    """Every KV scope a job opens on ``backend`` (the job's own, see app.llm.base.kv_scope)."""
    opened: list = []
    original = backend.kv_scope

    @contextmanager
    def capture(**kwargs):
        with original(**kwargs) as scope:
            opened.append(scope)
            yield scope

    monkeypatch.setattr(backend, "kv_scope", capture)
    return opened


def small_job(seed: int) -> SynthesisConfig:
    return SynthesisConfig(epsilon=8.0, shots=2, M=3, N=1, tmax=5, K=20, seed=seed)


#: Small jobs already run alone on the backend's defaults, by seed: their result and the tokens
#: their scope computed. Both depend on the seed and the settings only (tests restore what they
#: change), so two tests that need the same run share it.
ALONE: dict[int, tuple] = {}


def alone(backend, scopes: list, seed: int) -> tuple:
    """``small_job(seed)`` run alone on ``backend`` (its default KV budget), once per module:
    its result and the tokens its scope computed; the scope is checked freed."""
    if seed not in ALONE:
        require_shared_data(TREC_TRAIN)
        task = BUILTIN_TASKS["trec"]
        opened = len(scopes)
        result = synthesize(task, load_dataset(task, TREC_TRAIN), small_job(seed), backend)
        assert len(scopes) == opened + 1  # the job ran in one scope of its own
        scope = scopes[-1]
        assert scope.closed and scope.store_bytes == 0  # freed at the end of the job
        ALONE[seed] = (result, scope.tokens_computed)
    return ALONE[seed]


def test_kv_store_releases_the_same_tokens_and_computes_fewer(backend, scopes):
    # Incremental decoding changes no release: same seed, same demonstrations, same stats,
    # with fewer tokens run through the model. Token counts stay out of the stats (they
    # depend on the private records' lengths).
    require_shared_data(TREC_TRAIN)
    task = BUILTIN_TASKS["trec"]
    records = load_dataset(task, TREC_TRAIN)
    assert backend.kv_cache_mb > 0  # on by default
    on, on_computed = alone(backend, scopes, 11)
    opened, old = len(scopes), backend.kv_cache_mb
    try:
        backend.kv_cache_mb = 0.0
        off = synthesize(task, records, small_job(11), backend)
    finally:
        backend.kv_cache_mb = old
    scope = scopes[-1]
    assert len(scopes) == opened + 1 and scope.closed and scope.store_bytes == 0
    off_computed = scope.tokens_computed
    assert [d.text for d in on.demonstrations] == [d.text for d in off.demonstrations]
    assert on.stats == off.stats
    assert not any("token" in key for key in on.stats)
    assert on_computed < off_computed


def test_two_jobs_interleaved_on_one_backend_equal_each_job_alone(backend, scopes):
    # The in-process and Celery workers share one backend (behind the provider's lock):
    # two jobs whose calls alternate release what each releases alone and compute exactly
    # the tokens each computes alone (a shared store would let the second reuse the first's
    # instruction and prompts, and compute fewer).
    require_shared_data(TREC_TRAIN)
    task = BUILTIN_TASKS["trec"]
    records = load_dataset(task, TREC_TRAIN)
    lone = {seed: alone(backend, scopes, seed) for seed in (11, 12)}
    first = len(scopes)  # the scopes opened together come after these
    shared = RetryingBackend(backend, retry=RetryPolicy(sleep=lambda _s: None), lock=Lock())
    step = Barrier(2)  # both jobs finish each token step before either starts the next
    together: dict[int, tuple] = {}

    def run(seed: int) -> None:
        def lockstep(done: int, planned: int) -> None:
            with suppress(BrokenBarrierError):
                step.wait(timeout=120)

        try:
            result = synthesize(task, records, small_job(seed), shared, progress=lockstep)
            together[seed] = result.demonstrations
        finally:
            step.abort()  # the other job no longer waits for this one

    threads = [Thread(target=run, args=(seed,)) for seed in (11, 12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    computed = {scope.tokens_computed for scope in scopes[first:]}
    assert len(scopes) == first + 2 and all(scope.closed for scope in scopes)
    assert together == {seed: result.demonstrations for seed, (result, _) in lone.items()}
    assert computed == {lone[11][1], lone[12][1]}


def test_a_failing_job_frees_its_kv_store(backend, scopes):
    require_shared_data(TREC_TRAIN)
    task = BUILTIN_TASKS["trec"]
    records = load_dataset(task, TREC_TRAIN)

    def cancel_after_two(done: int, planned: int) -> None:
        if done >= 2 * 2:  # two token steps of two shots
            assert scopes[-1].store_bytes > 0  # the store held this job's caches
            raise RuntimeError("cancelled")

    with pytest.raises(RuntimeError, match="cancelled"):
        synthesize(task, records, small_job(13), backend, progress=cancel_after_two)
    assert scopes[-1].closed and scopes[-1].store_bytes == 0
