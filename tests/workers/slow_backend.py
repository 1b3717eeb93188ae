"""The slowed-down fake backend; it lives in :mod:`app.llm.fake` (used by
``workers.celery_app``'s test hook, ``DPSYN_TEST_FAKE_BACKEND_DELAY_S``)."""

from app.llm.fake import SlowBackend

__all__ = ["SlowBackend"]
