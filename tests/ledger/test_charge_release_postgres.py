"""Releasing a job's charge on a real PostgreSQL (issue 24, item 2): a job cancelled before the
worker's read mark gets its reservation back with a ledger entry saying why; a job that read
the data keeps its charge however it ends (succeeded, then a late cancel; failed), and the
ledger itself refuses to release a job that carries the read mark."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.db.models import Budget, Job, LedgerKind
from app.db.session import session_scope
from app.ledger import ledger
from app.llm.base import BackendError
from app.llm.fake import FakeBackend
from tests.api.conftest import Api, auth, make_api


@pytest.fixture
def api(postgres_url: str) -> Iterator[Api]:
    yield from make_api(postgres_url)


class FailingBackend(FakeBackend):
    def next_token_probs(self, prompts: Any, token_sets: Any) -> Any:
        raise BackendError("refused", status=400)


def _funded(api: Api) -> str:
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    return dataset["id"]


def _entries(url: str, job_id: str) -> list[tuple[str, str | None]]:
    with session_scope(url) as session:
        dataset_id = session.get(Job, job_id).dataset_id
        return [
            (e.kind, e.event.get(ledger.REASON_KEY))
            for e in ledger.history(session, dataset_id)
            if e.job_id == job_id
        ]


def _spent(url: str, dataset_id: str) -> ledger.Spend:
    with session_scope(url) as session:
        return ledger.spend(session, session.get(Budget, dataset_id))


def test_cancelled_before_the_read_mark_is_released_with_its_reason(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    assert _spent(api.url, dataset_id).jobs == 1
    with session_scope(api.url) as session:  # a worker claimed it, then died before reading
        session.get(Job, job["id"]).status = "running"
    api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(api.admin))
    api.run_worker(job["id"])
    with session_scope(api.url) as session:
        row = session.get(Job, job["id"])
        assert row.status == "cancelled" and row.touched_data is False
    (reserve, _), (kind, reason) = _entries(api.url, job["id"])
    assert reserve == LedgerKind.RESERVE and kind == LedgerKind.RELEASE
    assert reason is not None and "cancelled before it read any private record" in reason
    spent = _spent(api.url, dataset_id)
    # the job's reservation is gone; what stays is the dataset's count release, drawn for
    # its plan and charged once for the dataset, not for the job
    assert spent.jobs == 0 and spent.counts_epsilon > 0
    assert spent.epsilon == pytest.approx(spent.counts_epsilon, rel=1e-12)
    with session_scope(api.url) as session:
        [charge] = ledger.job_charges(session, [job["id"]]).values()
    assert charge == ledger.JobCharge(ledger.ChargeState.RELEASED, 0.0, reason)


def test_a_job_that_read_the_data_keeps_its_charge(api: Api) -> None:
    dataset_id = _funded(api)
    succeeded = api.submit(dataset_id).json()
    api.run_job(succeeded["id"])
    late = api.client.post(f"/v1/jobs/{succeeded['id']}/cancel", headers=auth(api.admin))
    assert late.status_code == 409  # its output is stored: nothing to cancel
    failed = api.submit(dataset_id).json()
    api.run_worker(failed["id"], FailingBackend(stop_after=None))
    kinds = {
        job_id: [k for k, _ in _entries(api.url, job_id)]
        for job_id in (succeeded["id"], failed["id"])
    }
    assert kinds == {
        succeeded["id"]: [LedgerKind.RESERVE, LedgerKind.COMMIT],
        failed["id"]: [LedgerKind.RESERVE, LedgerKind.COMMIT],
    }
    assert "result" in (_entries(api.url, succeeded["id"])[-1][1] or "")
    assert "when it failed" in (_entries(api.url, failed["id"])[-1][1] or "")
    assert _spent(api.url, dataset_id).jobs == 2
    with session_scope(api.url) as session:
        charges = ledger.job_charges(session, [succeeded["id"], failed["id"], "no-such-job"])
        assert set(charges) == {succeeded["id"], failed["id"]}
        assert all(c.state is ledger.ChargeState.CHARGED for c in charges.values())
        assert charges[failed["id"]].epsilon == session.get(Job, failed["id"]).epsilon


def test_the_ledger_refuses_to_release_a_job_with_the_read_mark(api: Api) -> None:
    dataset_id = _funded(api)
    job = api.submit(dataset_id).json()
    with session_scope(api.url) as session:
        session.get(Job, job["id"]).touched_data = True
    with session_scope(api.url) as session, pytest.raises(ledger.LedgerError, match="read the"):
        ledger.release(session, job["id"], reason="a caller that got the rule wrong")
    assert [k for k, _ in _entries(api.url, job["id"])] == [LedgerKind.RESERVE]
    assert _spent(api.url, dataset_id).jobs == 1
