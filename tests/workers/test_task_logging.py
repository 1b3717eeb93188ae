"""The Celery task never hands an exception's text to Celery's own logging."""

from __future__ import annotations

import logging

import pytest

import workers.celery_app as celery_app

CANARY = "CANARY-private-record-7f3a"


def test_an_unexpected_task_failure_is_logged_without_its_message(monkeypatch, caplog):
    def explode(job_id: str, **_: object) -> None:
        raise ValueError(f"could not store record {CANARY!r}")

    monkeypatch.setattr(celery_app, "run_job", explode)
    with caplog.at_level(logging.DEBUG):
        celery_app.run_job_task.run("job-1")  # no exception reaches Celery
    text = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert "ValueError" in text and "job-1" in text
    assert CANARY not in text


def test_a_claim_that_found_the_database_down_is_retried_without_its_message(monkeypatch):
    def down(job_id: str, **_: object) -> None:
        raise celery_app.DatabaseUnavailableError(f"connection refused near {CANARY}")

    monkeypatch.setattr(celery_app, "run_job", down)
    retried: list[BaseException] = []

    def retry(**kwargs: object) -> Exception:
        retried.append(kwargs["exc"])  # type: ignore[arg-type]
        return RuntimeError("retry")

    monkeypatch.setattr(celery_app.run_job_task, "retry", retry)
    with pytest.raises(RuntimeError, match="retry"):
        celery_app.run_job_task.run("job-2")
    assert retried and CANARY not in str(retried[0])
