"""How the API hands a committed job to a worker: the :class:`JobQueue` protocol.

The protocol lives in ``app`` because the API and the job service use it, and ``app`` never
imports ``workers``: the workers implement it (``workers.celery_app.CeleryQueue``,
``workers.inprocess.InProcessQueue``) and whoever composes the service passes one in. When
none is passed, :func:`load_runtime` imports the runtime named by ``DPSYN_RUNTIME`` (default
``workers.runtime``) by its name, the way Celery and uvicorn find an application: a
deployment choice, not a dependency of this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.llm.provider import BackendProvider
    from app.settings import Settings


class JobQueue(Protocol):
    def enqueue(self, job_id: str) -> None:
        """Schedule ``job_id`` (call only after the job row is committed)."""
        ...


class Runtime(Protocol):
    """What a job runtime offers the service: its queue, and its worker process."""

    def make_queue(self, settings: Settings, provider: BackendProvider | None = None) -> JobQueue:
        """The deployment's queue, started (see ``workers.queue_factory.make_queue``)."""
        ...

    def worker_main(self, argv: list[str]) -> None:
        """Run a worker of the distributed deployment with Celery's ``argv``."""
        ...


def load_runtime(settings: Settings) -> Runtime:
    """The runtime module ``settings.runtime`` names (a module satisfying :class:`Runtime`)."""
    module: Runtime = importlib.import_module(settings.runtime)
    return module
