"""One tiny PromptPATE run with the packaged CPU model: real forward passes end to end."""

from __future__ import annotations

import pytest

from app.pate.config import PateConfig
from app.pate.plan import plan_pate
from app.pate.public import cut, read_public
from app.pate.run import run_pate
from app.synthesis.data import load_dataset
from app.synthesis.tasks import BUILTIN_TASKS
from tests.conftest import require_shared_data, shared_data_dir

DATA = shared_data_dir()
SST2_TRAIN = DATA / "sst2" / "stsa.binary.train"
IMDB = DATA / "imdb" / "test_sample2000.jsonl"


@pytest.fixture(scope="module")
def backend(gemma):
    return gemma  # the session's packaged model (tests/conftest.py)


def test_three_teachers_label_six_imdb_reviews(backend):
    require_shared_data(SST2_TRAIN, IMDB)
    task = BUILTIN_TASKS["sst2"]
    private = load_dataset(task, SST2_TRAIN)
    public = read_public(IMDB)
    # Threshold 0 with small noise: 3 teachers always give some label >= 2 votes, so every
    # query is answered (the point is the real forward passes, not the privacy level). Four
    # backend calls in all (one per teacher, one for the single candidate), each of <= 6
    # prompts of inputs cut to 80 characters: a few seconds on an idle 2-core machine.
    config = PateConfig(
        epsilon=100.0,
        teachers=3,
        queries=6,
        max_public=6,
        threshold_fraction=0.0,
        sigma_threshold=0.5,
        sigma_gnmax=0.5,
        student_shots=1,
        candidates=1,
        max_chars=80,
        group_size=6,
        seed=0,
    )
    plan = plan_pate(task, len(private), len(public), config)
    result = run_pate(task, private, public, plan, backend)
    assert result.model == "gemma-3-270m" and result.method == "promptpate"
    assert (result.stats["processed"], result.stats["answered"]) == (6, 6)
    assert 0.0 <= result.stats["holdout_accuracy"] <= 1.0
    assert result.epsilon <= 100.0
    assert len(result.demonstrations) == 1
    cut_public = {cut(text, 80) for text in public}
    private_texts = {record.text for record in private}
    for demo in result.demonstrations:
        assert demo.label in task.labels
        assert demo.text in cut_public and demo.text not in private_texts
