"""The fake backend, slowed down: each model call sleeps, so that a job runs long enough for a
fault test to kill its worker or stop its database mid-job. Used by ``workers.celery_app``'s
test hook (``DPSYN_TEST_FAKE_BACKEND_DELAY_S``)."""

from __future__ import annotations

import time

from tests.synthesis.fake_backend import FakeBackend


class SlowBackend(FakeBackend):
    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def top_k(self, prompts, k):
        time.sleep(self.delay_s)
        return super().top_k(prompts, k)

    def next_token_probs(self, prompts, token_sets):
        time.sleep(self.delay_s)
        return super().next_token_probs(prompts, token_sets)
