"""One short real synthesis on shared TREC data with the packaged CPU model."""

from __future__ import annotations

import re

import pytest

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


def test_kv_store_releases_the_same_tokens_and_computes_fewer(backend):
    # Incremental decoding changes no release: same seed, same demonstrations, same stats,
    # with fewer tokens run through the model. Token counts stay out of the stats (they
    # depend on the private records' lengths).
    require_shared_data(TREC_TRAIN)
    task = BUILTIN_TASKS["trec"]
    records = load_dataset(task, TREC_TRAIN)
    config = SynthesisConfig(epsilon=8.0, shots=2, M=3, N=1, tmax=5, K=20, seed=7)
    runs = []
    old = backend.kv_cache_mb
    try:
        for mb in (0.0, 256.0):
            backend.kv_cache_mb = mb
            before = backend.tokens_computed
            result = synthesize(task, records, config, backend)
            runs.append((result, backend.tokens_computed - before))
            assert backend._store.bytes == 0  # emptied at the end of the job
    finally:
        backend.kv_cache_mb = old
    (off, off_computed), (on, on_computed) = runs
    assert [d.text for d in on.demonstrations] == [d.text for d in off.demonstrations]
    assert on.stats == off.stats
    assert not any("token" in key for key in on.stats)
    assert on_computed < off_computed
