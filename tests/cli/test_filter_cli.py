"""The ledger's filter at the command line (issue 51): ``jobs submit-batch`` declares jobs
together, ``budget show`` names the rule that priced the spend, the tight composition beside
it, and warns when an old ledger is over its budget."""

from __future__ import annotations

import json

from sqlalchemy import select

from app.db.models import Budget, LedgerEntry, LedgerKind
from app.db.session import session_scope
from app.privacy.accounting import TightPldAccountant
from app.privacy.events import to_dict
from tests.cli.live_server import upload
from tests.ledger.test_filter_migration import DELTA, JOBS

FAST = {"M": 2, "N": 1, "tmax": 4, "K": 8}


def _job(dataset: str, epsilon: float) -> dict:
    return {"dataset_id": dataset, "method": "tang", "epsilon": epsilon, "params": FAST}


def test_a_plan_submitted_as_one_batch_is_priced_by_the_one_batch_rule(
    dpsyn, trec_file, tmp_path, sqlite_url
):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("budget", "set", dataset, "--epsilon", "12").exit_code == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([_job(dataset, 1.0), _job(dataset, 2.0)]))
    result = dpsyn("jobs", "submit-batch", str(plan), "-q")
    assert result.exit_code == 0, result.output
    ids = result.stdout.split()
    assert len(ids) == 2
    with session_scope(sqlite_url) as session:
        rows = session.scalars(
            select(LedgerEntry).where(LedgerEntry.job_id.in_(ids), LedgerEntry.kind == "reserve")
        ).all()
        assert len({row.batch_id for row in rows}) == 1 and rows[0].batch_id not in ids
    shown = dpsyn("budget", "show", dataset)
    assert shown.exit_code == 0, shown.output
    assert "priced by the one-batch rule: the count releases and one batch" in shown.stdout
    assert "the tight composition of the same charges" in shown.stdout


def test_budget_show_warns_when_an_old_ledger_is_over_its_budget(dpsyn, trec_file, sqlite_url):
    dataset = upload(dpsyn, trec_file)
    assert dpsyn("datasets", "counts-public", dataset, "--yes").exit_code == 0
    composed = TightPldAccountant(cached=False).dataset_epsilon(JOBS, DELTA)
    set_ = dpsyn("budget", "set", dataset, "--epsilon", str(composed * 1.01), "--delta", "1e-6")
    assert set_.exit_code == 0, set_.output
    with session_scope(sqlite_url) as session:  # jobs the old rule admitted one at a time
        assert session.get(Budget, dataset) is not None
        for index, event in enumerate(JOBS):
            session.add(
                LedgerEntry(
                    dataset_id=dataset,
                    job_id=f"old{index}",
                    kind=LedgerKind.RESERVE.value,
                    epsilon=1.0,
                    delta=DELTA,
                    event=to_dict(event),
                )
            )
    shown = dpsyn("budget", "show", dataset)
    assert shown.exit_code == 0, shown.output
    assert "priced by the Rényi filter" in shown.stdout
    assert "warning: over budget" in shown.stderr
    assert "no new job is admitted while the spend is over the budget" in shown.stderr
