"""How the API hands a committed job to a worker. Implementations: Celery, in-process."""

from __future__ import annotations

from typing import Protocol


class JobQueue(Protocol):
    def enqueue(self, job_id: str) -> None:
        """Schedule ``job_id`` (call only after the job row is committed)."""
        ...
