"""Per-label spend, warn thresholds, the alert route, the spend gauge and the ledger CSV
(issue 24, items 2 and 3)."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.ledger import ledger
from app.privacy.accounting import Accounting, accountant_for
from app.privacy.events import (
    GaussianEvent,
    LabelEvent,
    PateEvent,
    SampledEvent,
    SynthesisEvent,
)
from app.privacy.filter import FilterParams, Item, price
from app.privacy.sampling import FixedSizeSampling, PoissonSampling
from app.services.budgets import SpendLevel, label_groups, spend_level
from tests.api.conftest import MARKER, TOY_TASK, Api, auth, error_of, make_api

METRICS_TOKEN = "metrics-token-for-the-budget-tests-0123456789"
THREE = {**TOY_TASK, "labels": ["w5", "w7", "w9"]}


def _rows() -> list[dict]:
    return [
        {"text": f"{MARKER}-{label}-{i} what is it", "label": label}
        for label in ("w5", "w7", "w9")
        for i in range(12)
    ]


def _groups(body: dict) -> dict[tuple[str, ...], dict]:
    return {tuple(g["labels"]): g for g in body["label_groups"]}


def _budget(api: Api, dataset_id: str) -> dict[str, Any]:
    response = api.client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(api.admin))
    assert response.status_code == 200, response.text
    return response.json()


def test_a_job_moves_only_the_label_groups_it_charged(api: Api) -> None:
    dataset = api.upload(_rows(), task=THREE)
    assert api.budget(dataset["id"], 20.0).status_code == 200
    empty = _budget(api, dataset["id"])
    assert set(_groups(empty)) == {("w5",), ("w7",), ("w9",)}
    assert all(g["spent"] == 0 and not g["binding"] for g in empty["label_groups"])

    first = api.submit(dataset["id"], 2.0, shots=2)  # two shots: two of the three labels
    assert first.status_code == 201, first.text
    after = _budget(api, dataset["id"])
    charged = {e["label"] for e in after["history"][-1]["event"]["labels"]}
    assert len(charged) == 2
    groups = _groups(after)
    # The dataset's count release, drawn for the first plan and charged once, reads every
    # label: each group holds its epsilon, and only the charged ones more.
    counts = after["counts_epsilon"]
    assert counts > 0 and [r["epsilon"] for r in after["count_releases"]] == [counts]
    for (label,), group in groups.items():
        assert (group["spent"] > counts * (1 + 1e-9)) == (label in charged), (label, group)
        if label not in charged:
            assert group["spent"] == pytest.approx(counts, rel=1e-12)
        assert group["jobs"] == (1 if label in charged else 0)
        assert group["remaining"] == pytest.approx(20.0 - group["spent"])
    binding = {g["labels"][0] for g in after["label_groups"] if g["binding"]}
    # One job; each label's rounds are priced at its own released (noisy) count, so the
    # labels need not tie: the binding ones are among those it charged.
    assert binding and binding <= charged
    assert all(groups[(label,)]["spent"] == after["spent"] for label in binding)
    assert after["spent"] == pytest.approx(max(g["spent"] for g in after["label_groups"]))


def test_the_groups_compose_as_the_ledger_does() -> None:
    """The largest group is the filter's price of the dataset (and its tight composition the
    accountant's dataset epsilon), for both accountants, on a ledger mixing synthesis jobs on
    different labels with a job that reads every record."""

    def step(sampling: Any, steps: int) -> SampledEvent:
        return SampledEvent(sampling, (GaussianEvent(1.2),), steps)

    for accounting, sampling, relation in (
        (Accounting.TIGHT, PoissonSampling(rate=0.2, groups=2), "add_or_remove"),
        (Accounting.PAPER, FixedSizeSampling(population=20, groups=2, group_size=2), "replace_one"),
    ):
        events = [
            SynthesisEvent(
                (LabelEvent("a", step(sampling, 6)), LabelEvent("b", step(sampling, 2)))
            ),
            SynthesisEvent((LabelEvent("b", step(sampling, 3)),)),
            PateEvent(noise_multiplier=8.0, relation=relation),
        ]
        params = FilterParams.for_budget(10.0, 1e-5)
        items = [Item(e, f"job{i}") for i, e in enumerate(events)]
        groups = label_groups(accounting, params, items, ["a", "b", "c"])
        composed = accountant_for(accounting).dataset_epsilon(events, 1e-5)
        assert max(g.composed for g in groups) == pytest.approx(composed, rel=1e-9)
        expected = price(params, accountant_for(accounting), items).epsilon
        assert max(g.epsilon for g in groups) == pytest.approx(expected, rel=1e-12)
        assert next(g for g in groups if g.binding).epsilon == pytest.approx(expected, rel=1e-12)
        assert expected > composed
        singles = {g.labels: g for g in groups if len(g.labels) == 1}
        assert singles[("c",)].jobs == 1  # only the job that reads every record
        assert singles[("b",)].jobs == 3
        assert 0 < singles[("c",)].epsilon < singles[("b",)].epsilon


def test_label_groups_match_the_ledger_spend_on_a_live_dataset(api: Api) -> None:
    from app.db.models import Budget
    from app.db.session import session_scope

    dataset = api.upload(_rows(), task=THREE)
    assert api.budget(dataset["id"], 20.0).status_code == 200
    for _ in range(3):
        assert api.submit(dataset["id"], 1.5, shots=1).status_code == 201
    body = _budget(api, dataset["id"])
    with session_scope(api.url) as session:
        budget = session.get(Budget, dataset["id"])
        assert budget is not None
        assert body["spent"] == pytest.approx(ledger.spend(session, budget).epsilon)
    assert body["spent"] == pytest.approx(max(g["spent"] for g in body["label_groups"]))


def test_warn_threshold_put_validation_and_default(api: Api) -> None:
    dataset = api.upload()
    created = api.budget(dataset["id"], 4.0)
    assert created.status_code == 200
    assert created.json()["warn_threshold"] == 0.8
    assert created.json()["level"] == "ok"
    for bad in (0, -0.5, 1.5, "0.5", True):
        response = api.budget(dataset["id"], 4.0, warn_threshold=bad)
        assert response.status_code == 422, (bad, response.text)
        assert "warn_threshold" in error_of(response)["message"]
    changed = api.budget(dataset["id"], 4.0, warn_threshold=0.5)
    assert changed.json()["warn_threshold"] == 0.5
    kept = api.budget(dataset["id"], 5.0)  # no threshold sent: unchanged
    assert kept.json()["warn_threshold"] == 0.5


def test_spend_levels() -> None:
    assert spend_level(0.0, 1.0, 0.8) is SpendLevel.OK
    assert spend_level(0.79, 1.0, 0.8) is SpendLevel.OK
    assert spend_level(0.8, 1.0, 0.8) is SpendLevel.WARN
    assert spend_level(0.9999, 1.0, 0.8) is SpendLevel.WARN
    assert spend_level(1.0, 1.0, 0.8) is SpendLevel.OVER
    assert spend_level(1.0, 1.0, 1.0) is SpendLevel.OVER


def test_over_threshold_route_lists_only_the_flagged(api: Api) -> None:
    quiet, loud = api.upload(name="quiet"), api.upload(name="loud")
    assert api.budget(quiet["id"], 50.0).status_code == 200
    assert api.budget(loud["id"], 3.0, warn_threshold=0.1).status_code == 200
    for dataset in (quiet, loud):
        assert api.submit(dataset["id"], 1.0).status_code == 201
    other = api.upload(key=api.other)  # another tenant's flagged dataset stays out
    assert api.budget(other["id"], 3.0, key=api.other, warn_threshold=0.1).status_code == 200
    assert api.submit(other["id"], 1.0, key=api.other).status_code == 201

    response = api.client.get("/v1/budgets?over_threshold=true", headers=auth(api.admin))
    assert response.status_code == 200
    flagged = response.json()
    assert [row["dataset_id"] for row in flagged] == [loud["id"]]
    row = flagged[0]
    assert row["name"] == "loud" and row["level"] == "warn"
    assert row["spent_fraction"] == pytest.approx(row["spent"] / 3.0)
    everyone = api.client.get("/v1/budgets", headers=auth(api.admin)).json()
    assert {r["dataset_id"] for r in everyone} == {quiet["id"], loud["id"]}
    assert (
        api.client.get("/v1/budgets?over_threshold=maybe", headers=auth(api.admin)).status_code
        == 422
    )
    assert api.client.get("/v1/budgets", headers=auth(api.reader)).status_code == 403
    assert api.client.get("/v1/budgets").status_code == 401


def test_spent_fraction_gauge_on_metrics(sqlite_url: str) -> None:
    for api in make_api(sqlite_url, metrics_token=METRICS_TOKEN):
        dataset = api.upload()
        assert api.budget(dataset["id"], 4.0, warn_threshold=0.6).status_code == 200
        assert api.submit(dataset["id"], 1.0).status_code == 201
        spent = _budget(api, dataset["id"])["spent"]
        response = api.client.get("/metrics", headers=auth(METRICS_TOKEN))
        families = {f.name: f for f in text_string_to_metric_families(response.text)}
        fraction = {
            s.labels["dataset_id"]: s.value for s in families["dpsyn_budget_spent_fraction"].samples
        }
        assert fraction[dataset["id"]] == pytest.approx(spent / 4.0)
        thresholds = families["dpsyn_budget_warn_threshold"].samples
        assert {s.labels["dataset_id"]: s.value for s in thresholds}[dataset["id"]] == 0.6
        for family in families.values():  # IDs and numbers only: no label name, no record
            for sample in family.samples:
                assert set(sample.labels) <= {"tenant_id", "dataset_id", "accounting", "status"}
        open_metrics = api.client.get("/metrics")
        assert open_metrics.status_code == 401  # with a token configured, none without it


def test_ledger_csv_export(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 6.0).status_code == 200
    job = api.submit(dataset["id"], 1.0).json()
    assert (
        api.client.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(api.admin)).status_code == 200
    )
    api.submit(dataset["id"], 2.0)
    url = f"/v1/datasets/{dataset['id']}/budget/ledger.csv"
    response = api.client.get(url, headers=auth(api.admin))
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["content-disposition"] == (
        f'attachment; filename="ledger-{dataset["id"]}.csv"'
    )
    rows = list(csv.DictReader(io.StringIO(response.text)))
    history = _budget(api, dataset["id"])["history"]
    assert [r["kind"] for r in rows] == [e["kind"] for e in history]
    assert [r["job_id"] for r in rows] == [e["job_id"] for e in history]
    assert [float(r["job_epsilon"]) for r in rows] == [e["epsilon"] for e in history]
    assert float(rows[-1]["composed_after"]) == pytest.approx(_budget(api, dataset["id"])["spent"])
    # the cancelled job was released: the plain sum after is the second job's own epsilon
    # and the dataset's count release's, drawn for the first job and charged once (its own
    # row, first, of kind counts, with the labels whose counts it released)
    assert [r["kind"] for r in rows] == ["counts", "reserve", "release", "reserve"]
    # timestamps carry their zone, on SQLite too (issue 43)
    assert all(r["created_at"].endswith("+00:00") for r in rows), rows[0]["created_at"]
    release = _budget(api, dataset["id"])["count_releases"][0]
    assert rows[0]["job_id"] == history[0]["count_release_id"] == release["id"]
    assert rows[0]["labels"] == "w5;w7"
    assert float(rows[-1]["plain_sum_after"]) == pytest.approx(
        history[-1]["epsilon"] + history[0]["epsilon"]
    )
    assert all(set(r["labels"].split(";")) <= {"w5", "w7"} for r in rows)
    assert api.client.get(url, headers=auth(api.reader)).status_code == 403
    assert api.client.get(url, headers=auth(api.other)).status_code == 404


def test_csv_cells_never_start_a_formula() -> None:
    from datetime import UTC, datetime

    from app.db.models import LedgerEntry
    from app.services.budgets import ledger_csv

    entry = LedgerEntry(
        id=1,
        dataset_id="d",
        job_id="j",
        kind="reserve",
        epsilon=1.0,
        delta=1e-5,
        event={"labels": [{"label": "=HYPERLINK(1)"}, {"label": "ok"}]},
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    text = ledger_csv([ledger.SpendPoint(entry=entry, epsilon=0.5, plain_sum=1.0)])
    row = next(iter(csv.DictReader(io.StringIO(text))))
    assert row["labels"] == "'=HYPERLINK(1);ok"


def test_thresholds_groups_and_csv_on_postgres(postgres_url: str) -> None:
    """The same route, threshold column (migration 0010) and breakdown on PostgreSQL."""
    for api in make_api(postgres_url):
        dataset = api.upload(_rows(), task=THREE, name="pg")
        assert api.budget(dataset["id"], 3.0, warn_threshold=0.2).status_code == 200
        assert api.submit(dataset["id"], 1.0, shots=2).status_code == 201
        body = _budget(api, dataset["id"])
        assert body["warn_threshold"] == 0.2 and body["level"] == "warn"
        assert body["spent"] == pytest.approx(max(g["spent"] for g in body["label_groups"]))
        flagged = api.client.get("/v1/budgets?over_threshold=true", headers=auth(api.admin))
        assert [r["dataset_id"] for r in flagged.json()] == [dataset["id"]]
        url = f"/v1/datasets/{dataset['id']}/budget/ledger.csv"
        rows = list(csv.DictReader(io.StringIO(api.client.get(url, headers=auth(api.admin)).text)))
        assert [r["kind"] for r in rows] == ["counts", "reserve"]
