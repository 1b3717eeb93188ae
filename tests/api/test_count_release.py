"""Issue 41 through the service: a dataset's label counts are released once per version of
its records, charged once as a ledger entry of its own (kind ``counts``), and read by every
quote, refusal and job of the dataset; the same request plans the same job to the last digit;
counts declared public and PromptPATE draw no release; the release is its own line in the
budget, the ledger and its CSV; and no exact count reaches a quote, a refusal or a job record.

On SQLite and PostgreSQL (the release is drawn under the dataset's and the budget's row
locks, and stored in a table of its own, migration 0015)."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from app.db import record_keys
from app.db.models import CountReleaseRow, Dataset, DatasetRecord, Job, LedgerEntry, LedgerKind
from app.db.session import session_scope
from app.privacy import unit
from app.services import count_releases
from tests.api.conftest import (
    FAST_PARAMS,
    MARKER,
    PATE_PARAMS,
    Api,
    auth,
    error_of,
    make_api,
    toy_rows,
)
from tests.ui.test_pages import job_form, sign_in

JSON = {"Accept": "application/json"}


@pytest.fixture(params=["sqlite", "postgres"])
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "postgres_url")
    yield from make_api(url)


def _sealed(dataset_id: str, words: str) -> bytes:
    """One more record of label w5 for the dataset, sealed as an upload seals it."""
    [value] = record_keys.current().seal_records(dataset_id, [(f"{MARKER} {words}", "w5")])
    return value


def _request(dataset_id: str, epsilon: float = 1.0, **kw: Any) -> dict[str, Any]:
    return {
        "dataset_id": dataset_id,
        "method": "tang",
        "epsilon": epsilon,
        "shots": 2,
        "params": FAST_PARAMS,
        **kw,
    }


def _post(api: Api, path: str, body: dict[str, Any]) -> Any:
    return api.client.post(path, json=body, headers=auth(api.admin))


def _budget(api: Api, dataset_id: str) -> dict[str, Any]:
    response = api.client.get(f"/v1/datasets/{dataset_id}/budget", headers=auth(api.admin))
    assert response.status_code == 200, response.text
    return response.json()


def _ledger_csv(api: Api, dataset_id: str) -> list[dict[str, str]]:
    url = f"/v1/datasets/{dataset_id}/budget/ledger.csv"
    response = api.client.get(url, headers=auth(api.admin))
    assert response.status_code == 200, response.text
    return list(csv.DictReader(io.StringIO(response.text)))


def _stored_releases(api: Api, dataset_id: str) -> tuple[list[str], list[str]]:
    """The dataset's stored releases and its ledger's counts entries (their release IDs)."""
    with session_scope(api.url) as session:
        rows = session.scalars(
            select(CountReleaseRow.id)
            .where(CountReleaseRow.dataset_id == dataset_id)
            .order_by(CountReleaseRow.created_at, CountReleaseRow.id)
        ).all()
        entries = session.scalars(
            select(LedgerEntry.job_id)
            .where(LedgerEntry.dataset_id == dataset_id, LedgerEntry.kind == LedgerKind.COUNTS)
            .order_by(LedgerEntry.id)
        ).all()
    return list(rows), list(entries)


def test_three_quotes_and_the_job_they_admit_carry_the_same_epsilon(api: Api) -> None:
    """The same request plans the same job: the same epsilon (==, not approximately) and the
    same noise per label, in every quote (API and dashboard) and in the job it admits."""
    dataset = api.upload(toy_rows(9) + toy_rows(4, labels=("w7",)))  # 9 and 13 records
    assert api.budget(dataset["id"], 10.0).status_code == 200
    body = _request(dataset["id"])
    quotes = [_post(api, "/v1/jobs/quote", body) for _ in range(3)]
    assert all(q.status_code == 200 for q in quotes), [q.text for q in quotes]
    csrf = sign_in(api.client, api.admin)
    dashboard = api.client.post("/ui/jobs/quote", data=job_form(dataset["id"], csrf), headers=JSON)
    assert dashboard.status_code == 200, dashboard.text
    job = _post(api, "/v1/jobs", body)
    assert job.status_code == 201, job.text
    admitted = job.json()

    epsilons = {q.json()["epsilon"] for q in quotes} | {dashboard.json()["epsilon"]}
    assert epsilons == {admitted["epsilon"]}
    noise = admitted["noise"]
    assert set(noise) == {"w5", "w7"} and all(sigma > 0 for sigma in noise.values())
    assert all(q.json()["noise"] == noise for q in quotes) and dashboard.json()["noise"] == noise
    # Each label at its own noise, calibrated to its own released size (estimates that
    # happen to be equal give equal noise).
    with session_scope(api.url) as session:
        planned = session.get(Job, admitted["id"]).config["planned_sizes"]  # type: ignore[union-attr]
    assert (noise["w5"] == noise["w7"]) == (planned["w5"] == planned["w7"])
    # Every plan read one release, drawn for the first quote and charged once.
    releases, entries = _stored_releases(api, dataset["id"])
    assert releases == entries == [admitted["count_release_id"]]
    counts = _budget(api, dataset["id"])["counts_epsilon"]
    assert all(q.json()["counts_epsilon"] == counts for q in quotes)
    assert dashboard.json()["counts_epsilon"] == counts


def test_quotes_refusals_cancellations_and_jobs_share_one_release_charged_once(
    api: Api,
) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 3.0).status_code == 200
    assert _budget(api, dataset["id"])["count_releases"] == []  # none before a plan needs it
    for _ in range(3):
        assert _post(api, "/v1/jobs/quote", _request(dataset["id"])).status_code == 200
    cancelled = api.submit(dataset["id"]).json()
    cancel = api.client.post(f"/v1/jobs/{cancelled['id']}/cancel", headers=auth(api.admin))
    assert cancel.status_code == 200 and cancel.json()["charge"] == "released"
    admitted = [api.submit(dataset["id"]).json() for _ in range(2)]
    # Does not fit what the release and the jobs left (but is within the whole budget, so it
    # is planned): refused twice with the same words, as both plans read the same release.
    refusals = [api.submit(dataset["id"], 3.0) for _ in range(2)]
    assert [r.status_code for r in refusals] == [409, 409], [r.text for r in refusals]
    assert error_of(refusals[0]) == error_of(refusals[1])
    assert error_of(refusals[0])["code"] == "budget_exceeded"

    releases, entries = _stored_releases(api, dataset["id"])
    assert len(releases) == 1 and entries == releases
    [release_id] = releases
    assert {j["count_release_id"] for j in [cancelled, *admitted]} == {release_id}

    budget = _budget(api, dataset["id"])
    [release] = budget["count_releases"]
    assert (release["id"], release["current"], release["labels"]) == (
        release_id,
        True,
        ["w5", "w7"],
    )
    # Charged at the service's share of the budget (its epsilon recomputed from its noise).
    assert release["epsilon"] == pytest.approx(0.05 * 3.0, rel=1e-3)
    assert release["delta"] == pytest.approx(0.05 * budget["delta"], rel=1e-12)
    assert release["sigma"] == pytest.approx(
        unit.count_noise_multiplier(0.05 * 3.0, release["delta"]), rel=1e-12
    )
    assert budget["counts_epsilon"] == release["epsilon"]
    assert budget["live_jobs"] == 2 and budget["spent"] > budget["counts_epsilon"]
    kinds = [e["kind"] for e in budget["history"]]
    assert kinds.count("counts") == 1 and kinds[0] == "counts"
    assert budget["history"][0]["count_release_id"] == release_id
    assert budget["history"][0]["reason"] is None
    # Its own row in the CSV, once.
    rows = _ledger_csv(api, dataset["id"])
    assert [r["job_id"] for r in rows if r["kind"] == "counts"] == [release_id]
    # And in the tenant's budget list.
    [listed] = [
        b
        for b in api.client.get("/v1/budgets", headers=auth(api.admin)).json()
        if b["dataset_id"] == dataset["id"]
    ]
    assert listed["counts_epsilon"] == budget["counts_epsilon"]


def _change_records(api: Api, dataset_id: str) -> None:
    """A new version of the dataset's records: one more w5 record, and its row's counts."""
    with session_scope(api.url) as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        session.add(DatasetRecord(dataset_id=dataset_id, sealed=_sealed(dataset_id, "one more")))
        counts = dict(dataset.label_counts or {})
        counts["w5"] = int(counts["w5"]) + 1
        dataset.label_counts = counts
        dataset.record_count += 1


def test_changed_records_get_a_new_release_charged_again(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], 4.0).status_code == 200
    first = api.submit(dataset["id"]).json()
    assert _post(api, "/v1/jobs/quote", _request(dataset["id"])).status_code == 200
    assert len(_stored_releases(api, dataset["id"])[0]) == 1

    _change_records(api, dataset["id"])
    quote = _post(api, "/v1/jobs/quote", _request(dataset["id"]))
    assert quote.status_code == 200, quote.text
    second = api.submit(dataset["id"]).json()

    releases, entries = _stored_releases(api, dataset["id"])
    assert len(releases) == 2 and entries == releases
    assert first["count_release_id"] == releases[0]
    assert second["count_release_id"] == releases[1]
    budget = _budget(api, dataset["id"])
    old, new = budget["count_releases"]
    assert (old["id"], old["current"], new["id"], new["current"]) == (
        releases[0],
        False,
        releases[1],
        True,
    )
    assert budget["counts_epsilon"] == pytest.approx(old["epsilon"] + new["epsilon"])
    assert quote.json()["counts_epsilon"] == budget["counts_epsilon"]
    assert [e["kind"] for e in budget["history"]].count("counts") == 2
    assert [r["kind"] for r in _ledger_csv(api, dataset["id"])].count("counts") == 2


def test_counts_declared_public_draw_no_release(api: Api) -> None:
    dataset = api.upload(counts_public=True)
    assert api.budget(dataset["id"], 3.0).status_code == 200
    quote = _post(api, "/v1/jobs/quote", _request(dataset["id"]))
    assert quote.status_code == 200, quote.text
    job = api.submit(dataset["id"]).json()
    api.run_job(job["id"])
    done = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert done["counts"] == "declared_public" and done["count_release_id"] is None
    assert set(done["noise"]) == {"w5", "w7"} and quote.json()["noise"] == done["noise"]
    assert quote.json()["epsilon"] == done["epsilon"]
    assert _stored_releases(api, dataset["id"]) == ([], [])
    budget = _budget(api, dataset["id"])
    assert budget["count_releases"] == [] and budget["counts_epsilon"] == 0
    assert quote.json()["counts_epsilon"] == 0
    assert "counts" not in {e["kind"] for e in budget["history"]}


def test_a_promptpate_job_draws_no_release(api: Api) -> None:
    dataset = api.upload()
    public = api.upload_public()
    assert api.budget(dataset["id"], 10.0).status_code == 200
    body = {
        "dataset_id": dataset["id"],
        "method": "promptpate",
        "public_dataset_id": public["id"],
        "epsilon": 3.0,
        "shots": 2,
        "params": PATE_PARAMS,
    }
    assert _post(api, "/v1/jobs/quote", body).status_code == 200
    job = api.submit_pate(dataset["id"], public["id"])
    assert job.status_code == 201, job.text
    assert job.json()["counts"] is None and job.json()["count_release_id"] is None
    assert job.json()["noise"] == {}
    api.run_worker(job.json()["id"])
    assert _stored_releases(api, dataset["id"]) == ([], [])
    budget = _budget(api, dataset["id"])
    assert budget["count_releases"] == [] and budget["counts_epsilon"] == 0


# --- no exact count in a quote, a refusal or a job record -----------------------------------

SIZES = {"w5": 37, "w7": 53}  # 90 records: none of these numbers may be shown
_SKIPPED = re.compile(r"(^|_)(id|at)$|^id$")  # IDs and times hold digits that are no count


def _numbers(value: Any, key: str = "") -> list[float]:
    """Every number in ``value``: JSON numbers, and numbers written inside its texts (a
    message), but not the digits of IDs and timestamps."""
    if isinstance(value, bool) or _SKIPPED.search(key):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, str):
        return [float(n) for n in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?(?![\w])", value)]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in _numbers(v, str(k))]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v, key)]
    return []


def _exact_counts(bodies: dict[str, Any]) -> dict[str, list[float]]:
    """Where a body holds an exact count (a label's, the total, one more) or its inverse."""
    exact = [*SIZES.values(), sum(SIZES.values()), sum(SIZES.values()) + 1]
    forbidden = [float(n) for n in exact] + [1 / n for n in exact]
    found: dict[str, list[float]] = {}
    for name, body in bodies.items():
        hits = [
            n for n in _numbers(body) if any(math.isclose(n, f, rel_tol=1e-9) for f in forbidden)
        ]
        if hits:
            found[name] = hits
    return found


@pytest.fixture
def offset_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """The release as drawn, but each noisy count at its exact value plus 30.25 (a possible
    draw): so that no estimate a plan reads can equal an exact count by chance."""
    real = count_releases.release_counts

    def offset(sizes: Any, epsilon: float, delta: float, rng: Any, release_id: str = "") -> Any:
        drawn = real(sizes, epsilon, delta, rng, release_id)
        noisy = {str(k): float(v) + 30.25 for k, v in sizes.items()}
        return unit.CountRelease(drawn.sigma, noisy, drawn.epsilon, drawn.delta, drawn.id)

    monkeypatch.setattr(count_releases, "release_counts", offset)


def test_no_exact_count_in_a_quote_a_refusal_or_a_job_record(
    api: Api, offset_release: None
) -> None:
    rows = [r for label, n in SIZES.items() for r in toy_rows(n, labels=(label,))]
    dataset = api.upload(rows)
    assert api.budget(dataset["id"], 3.0).status_code == 200
    bodies: dict[str, Any] = {}
    quote = _post(api, "/v1/jobs/quote", _request(dataset["id"]))
    bodies["quote"] = quote.json()
    csrf = sign_in(api.client, api.admin)
    dashboard = api.client.post("/ui/jobs/quote", data=job_form(dataset["id"], csrf), headers=JSON)
    bodies["dashboard quote"] = dashboard.json()
    job = api.submit(dataset["id"])
    assert job.status_code == 201, job.text
    bodies["job"] = job.json()
    too_big = api.submit(dataset["id"], 3.0)  # planned, then refused: it does not fit
    assert too_big.status_code == 409, too_big.text
    bodies["too big"] = error_of(too_big)
    calibration = api.submit(
        dataset["id"],
        0.05,
        method="adadpsyn",
        params={"M": 2, "N": 1, "tmax": 1, "K": 8, "variant": "paper", "sigma0": 2, "sigma2": 2},
    )
    assert calibration.status_code == 422, calibration.text
    bodies["calibration"] = error_of(calibration)
    # Records changed behind the service's back after admission: the worker refuses the job
    # in words that name no count (it once wrote "the dataset has 91 records but ...").
    with session_scope(api.url) as session:
        session.add(DatasetRecord(dataset_id=dataset["id"], sealed=_sealed(dataset["id"], "x")))
    api.run_worker(job.json()["id"])
    bodies["refused run"] = api.client.get(
        f"/v1/jobs/{job.json()['id']}", headers=auth(api.admin)
    ).json()
    assert bodies["refused run"]["status"] == "failed"
    assert "records changed" in bodies["refused run"]["error"]
    bodies["jobs"] = api.client.get("/v1/jobs", headers=auth(api.admin)).json()
    assert _exact_counts(bodies) == {}
    assert _numbers({"message": "the dataset has 91 records"}) == [91.0]  # the check sees one
