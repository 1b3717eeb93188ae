"""One lock order on a real PostgreSQL: job rows, then private datasets, then public ones,
then budgets (``app.ledger.ledger.lock_budget``).

Each test replays, step by step on two connections, an interleaving that deadlocked before:

* a job settling (its row locked, then the budget, then a key-share lock on the dataset
  through the ledger entry's foreign key) against an admission or a budget change (the
  dataset, then the budget): PostgreSQL aborted one of them with ``DeadlockDetected``, and
  the API answered 503 ``database_unavailable``;
* a worker settling a job against the deletion of its dataset (which locked the dataset
  and then the job).

Now the second transaction waits for the first and both commit. A step that would wait is run
in a thread; the test waits until PostgreSQL reports that thread's backend waiting on a lock,
so the interleaving is the one described, not a race that may or may not happen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.db.models import Dataset, Job, JobStatus, LedgerKind
from app.db.session import session_scope
from app.ledger import ledger
from app.services.datasets import delete_dataset
from app.services.job_end import close_job
from tests.api.conftest import Api, make_api


@pytest.fixture
def api(postgres_url: str) -> Iterator[Api]:
    yield from make_api(postgres_url)


def _queued_job(api: Api) -> tuple[str, str]:
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    job = api.submit(dataset["id"]).json()
    assert job["status"] == "queued", job
    return dataset["id"], job["id"]


def _pid(session: Session) -> int:
    return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _wait_until_blocked(url: str, pid: int, thread: threading.Thread) -> None:
    """Until the backend ``pid`` waits on a row lock (or the thread has ended)."""
    deadline = time.monotonic() + 20.0
    with session_scope(url) as session:
        while time.monotonic() < deadline and thread.is_alive():
            waiting = session.execute(
                text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"),
                {"pid": pid},
            ).scalar_one_or_none()
            if waiting == "Lock":
                return
            session.rollback()
            time.sleep(0.02)
    raise AssertionError("the second transaction never waited for the first one's lock")


class Step(threading.Thread):
    """``work(session)`` then commit, on a session of its own; keeps what it raised."""

    def __init__(self, url: str, work: Callable[[Session], Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.work = url, work
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.pid = 0

    def run(self) -> None:
        try:
            with session_scope(self.url) as session:
                self.pid = _pid(session)
                self.ready.set()
                self.work(session)
                session.commit()
        except BaseException as err:
            self.error = err
        finally:
            self.ready.set()


def _settle(job_id: str) -> Callable[[Session], None]:
    """What a worker does when a job ends: its row locked, then closed (ledger entry)."""

    def work(session: Session) -> None:
        job = session.scalars(select(Job).where(Job.id == job_id).with_for_update()).one()
        close_job(session, job, status=JobStatus.CANCELLED, error=None)

    return work


def _lock_dataset(session: Session, dataset_id: str) -> None:
    session.scalars(select(Dataset).where(Dataset.id == dataset_id).with_for_update()).one()


def test_settlement_waits_for_an_admission_in_the_same_order(api: Api) -> None:
    dataset_id, job_id = _queued_job(api)
    with session_scope(api.url) as admission:  # admission and budget PUT: the dataset first
        _lock_dataset(admission, dataset_id)
        settle = Step(api.url, _settle(job_id))
        settle.start()
        settle.ready.wait()
        _wait_until_blocked(api.url, settle.pid, settle)
        ledger.lock_budget(admission, dataset_id)  # then the budget: deadlocked before
        admission.commit()
    settle.join(30)
    assert settle.error is None, repr(settle.error)
    with session_scope(api.url) as session:
        kinds = [e.kind for e in ledger.history(session, dataset_id) if e.job_id == job_id]
    assert kinds == [LedgerKind.RESERVE, LedgerKind.RELEASE]


def test_deleting_a_dataset_waits_for_a_job_being_settled(api: Api) -> None:
    dataset_id, job_id = _queued_job(api)
    with session_scope(api.url) as worker:  # a worker holds the job's row
        job = worker.scalars(select(Job).where(Job.id == job_id).with_for_update()).one()
        tenant_id = worker.get(Dataset, dataset_id).tenant_id
        deletion = Step(api.url, lambda s: delete_dataset(s, tenant_id, dataset_id))
        deletion.start()
        deletion.ready.wait()
        _wait_until_blocked(api.url, deletion.pid, deletion)
        close_job(worker, job, status=JobStatus.CANCELLED, error=None)  # dataset, then budget
        worker.commit()
    deletion.join(30)
    assert deletion.error is None, repr(deletion.error)
    with session_scope(api.url) as session:
        assert session.get(Dataset, dataset_id).deleted_at is not None
        assert session.get(Job, job_id).status == JobStatus.CANCELLED
        kinds = [e.kind for e in ledger.history(session, dataset_id) if e.job_id == job_id]
    assert kinds == [LedgerKind.RESERVE, LedgerKind.RELEASE]  # closed once, by the worker
