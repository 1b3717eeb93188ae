"""The job queue a deployment uses: Celery when a broker is configured, else in-process."""

from __future__ import annotations

from app.llm.provider import BackendProvider, provider_for
from app.services.queue import JobQueue
from app.settings import Settings


def make_queue(settings: Settings, provider: BackendProvider | None = None) -> JobQueue:
    """A :class:`~workers.celery_app.CeleryQueue` if ``settings.broker_url`` is set, else a
    :class:`~workers.inprocess.InProcessQueue` sharing ``provider`` with the API (one model
    per process; default: built from the settings). Either is returned started, with the
    outbox's dispatcher running (``workers.lease.Dispatcher``); ``close()`` stops it."""
    from workers.lease import DispatchConfig, LeaseConfig

    if settings.broker_url:
        from workers.celery_app import CeleryQueue, make_celery

        return CeleryQueue(make_celery(settings)).start_dispatcher(
            settings.database_url, DispatchConfig.from_settings(settings)
        )
    from workers.inprocess import InProcessQueue

    return InProcessQueue(
        database_url=settings.database_url,
        provider=provider or provider_for(settings),
        timeout_s=settings.job_timeout_s,
        lease=LeaseConfig.from_settings(settings),
        dispatch=DispatchConfig.from_settings(settings),
    ).start()
