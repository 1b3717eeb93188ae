"""The real API in a process of its own, which stops dead at one point of ``submit_job``.

Run as ``python -m tests.workers.paused_api PORT POINT MARKER`` with the ``DPSYN_*`` settings
of the deployment and ``DPSYN_TEST_QUEUE`` (the Celery queue the test's workers consume).
``POINT`` is where the first job submission stops:

* ``before_commit``: the job row and its reservation are flushed, the transaction is open;
* ``before_enqueue``: the transaction is committed, the task not sent yet;
* ``after_enqueue``: the task is sent, the response not written yet.

There the request thread writes ``MARKER`` and blocks for good, so that the test can SIGKILL
the process at exactly that point. Everything else is the production code: uvicorn, the
FastAPI app, ``submit_job``, the Celery queue. The pause is wired here, by wrapping the
ledger's ``admit`` and the queue, so the service has no test hook for it.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

POINTS = ("before_commit", "before_enqueue", "after_enqueue")


def _pause(marker: Path) -> None:
    marker.write_text("paused")
    threading.Event().wait()  # until the test kills the process


class PausingQueue:
    """A Celery queue that stops before or after sending the first task, as told."""

    def __init__(self, inner: Any, point: str, marker: Path) -> None:
        self.inner, self.point, self.marker = inner, point, marker

    def enqueue(self, job_id: str) -> None:
        if self.point == "before_enqueue":
            _pause(self.marker)
        self.inner.enqueue(job_id)
        if self.point == "after_enqueue":
            _pause(self.marker)


def _pause_after(admit: Callable[..., Any], marker: Path) -> Callable[..., Any]:
    def admit_then_pause(*args: Any, **kwargs: Any) -> Any:
        result = admit(*args, **kwargs)
        _pause(marker)
        return result

    return admit_then_pause


def main(port: int, point: str, marker: Path) -> None:
    import uvicorn

    from app.ledger import ledger
    from app.llm.provider import StaticProvider
    from app.main import create_app
    from app.settings import Settings
    from tests.synthesis.fake_backend import FakeBackend
    from workers.celery_app import CeleryQueue, make_celery

    if point not in POINTS:
        raise SystemExit(f"POINT must be one of {', '.join(POINTS)}, not {point!r}")
    settings = Settings()
    celery_queue = CeleryQueue(make_celery(settings), queue=os.environ["DPSYN_TEST_QUEUE"])
    if point == "before_commit":
        ledger.admit = _pause_after(ledger.admit, marker)  # type: ignore[method-assign]
    queue = PausingQueue(celery_queue, point, marker)
    app = create_app(settings, queue=queue, backend_provider=StaticProvider(FakeBackend()))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="info")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
