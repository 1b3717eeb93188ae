"""The job runtime the service loads by name (``DPSYN_RUNTIME``, default this module).

``app`` never imports ``workers``; :func:`app.services.queue.load_runtime` imports this
module by its name when the API needs a queue (``create_app`` without one) or ``dpsyn
worker`` starts a Celery worker. It satisfies :class:`app.services.queue.Runtime`.
"""

from __future__ import annotations

from workers.queue_factory import make_queue

__all__ = ["make_queue", "worker_main"]


def worker_main(argv: list[str]) -> None:
    """Run a Celery worker (the Celery app is built from the settings on import)."""
    from workers.celery_app import app

    app.worker_main(argv)
