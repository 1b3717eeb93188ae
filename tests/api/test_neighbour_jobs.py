"""Issue 32 through the service: one record changes what a job writes only through DP outputs.

For each of the four methods, a real service job (the API admits it, the real worker runs it)
on D, on D minus one record and on D with one record relabelled. The one mechanism that reads
a private count, the dataset's count release (drawn once for the dataset, issue 41), is
conditioned on one outcome (patched to give the same value for all three, after the same noise
draws; PromptPATE reads no count at all and draws none), as a neighbour test of a DP release
must be. Then every body the service returns about the job is
compared field by field: the job (admin key), its prompt and the prompt list (a prompts:read
key), the budget with its ledger (admin key). Equal but for fields that name the object
itself (IDs, times) and the DP outputs, named in ``_OWN`` and ``_DP``: nothing else may
differ. The dataset's own record (``record_count``, ``label_counts``) is the owner's metadata,
read by admin keys only, and is not compared.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from app.db.models import KeyScope
from app.db.session import session_scope
from app.llm.provider import StaticProvider
from app.privacy import rng as rng_module
from app.privacy import unit
from app.privacy.unit import CountRelease
from app.services import count_releases
from app.services.tenants import create_api_key, create_tenant
from tests.api.conftest import (
    FAST_PARAMS,
    Api,
    auth,
    make_api,
    toy_rows,
)

# Fields that name the object, or when something happened: they differ between any two jobs.
_OWN = {
    "id",
    "job_id",
    "dataset_id",
    "prompt_id",
    "public_dataset_id",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "at",
    "time",
    "count_release",  # the dataset's count release, by ID (its ledger entry, the job's plan)
    "count_release_id",
    "submitted_by",  # the submitting key's ID (each neighbour has a tenant of its own)
    "batch",  # a reserve entry's batch: its own job ID when submitted alone
}
# DP outputs: the demonstrations and the prompt built from them, PromptPATE's answered-query
# count and student choice (post-processing of noisy votes), the soft prompt's hash.
# The demonstrations left out (counted per reason) and the prompt's notes on them are
# functions of the demonstrations, so DP outputs too.
_DP = {"demonstrations", "prompt", "text", "soft_prompt", "soft_prompt_sha256", "notes"}
_DP |= {"empty_demonstrations", "short_demonstrations", "echo_demonstrations"}
_DP |= {"demonstrations_served", "demonstrations_dropped"}  # counted from the same
RELEASED = 23  # what the patched release gives every count


def _strip(value: Any) -> Any:
    """``value`` without the fields that may differ, at any depth."""
    if isinstance(value, dict):
        kept = {k: _strip(v) for k, v in value.items() if k not in _OWN | _DP}
        return kept or None  # a stats object that held only DP counts reads as none
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _lines(bodies: dict[str, Any]) -> list[str]:
    """The bodies without the fields that may differ, a line per value (readable diffs)."""
    return json.dumps(_strip(bodies), indent=1, sort_keys=True).splitlines()


def _neighbours() -> dict[str, list[dict]]:
    base = toy_rows(14) + toy_rows(3, labels=("w7",))  # uneven labels: 14 and 17
    first = base[0]
    other = "w7" if first["label"] == "w5" else "w5"
    return {
        "D": base,
        "D minus one": base[1:],
        "D relabelled": [{**first, "label": other}, *base[1:]],
    }


def _patch_release(
    monkeypatch: pytest.MonkeyPatch, outcome: Callable[[dict[str, int]], dict[str, float]]
) -> list[dict[str, int]]:
    """Make the dataset's count release give ``outcome`` of the exact counts, after the real
    release's noise draws, at its real noise and cost; returns the exact counts it read."""
    seen: list[dict[str, int]] = []

    def release(
        sizes: Mapping[str, int], epsilon: float, delta: float, rng: Any, release_id: str = ""
    ) -> CountRelease:
        exact = {str(k): int(v) for k, v in sizes.items()}
        seen.append(exact)
        drawn = unit.release_counts(exact, epsilon, delta, rng, release_id)
        return CountRelease(drawn.sigma, outcome(exact), drawn.epsilon, drawn.delta, drawn.id)

    monkeypatch.setattr(count_releases, "release_counts", release)
    return seen


@pytest.fixture
def released(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, int]]]:
    """Condition every count release on one outcome, and every generator on one seed;
    record what the releases read."""
    seen = _patch_release(monkeypatch, lambda exact: dict.fromkeys(exact, float(RELEASED)))
    # "Same seed": every generator the service and the worker make (the label schedule, the
    # noise, PromptPATE's teacher key) starts from one seed instead of OS entropy.
    monkeypatch.setattr(rng_module, "secrets", SimpleNamespace(randbits=lambda bits: 2026))
    yield seen


def _get(api: Api, path: str, key: str) -> Any:
    response = api.client.get(path, headers=auth(key))
    assert response.status_code == 200, response.text
    return response.json()


def _tenant(api: Api) -> tuple[str, str]:
    """A tenant of its own (an admin and a prompts:read key): the neighbours share records,
    which one tenant may upload only once (docs/privacy.md, "Budgets follow the records"),
    while each neighbour here must be a dataset with a budget of its own."""
    with session_scope(api.url) as session:
        tenant, admin = create_tenant(session, f"neighbour-{uuid.uuid4().hex[:8]}")
        _, reader = create_api_key(session, tenant.id, KeyScope.PROMPTS_READ)
    return admin, reader


def _run(api: Api, method: str, rows: list[dict]) -> dict[str, Any]:
    """Upload ``rows`` in a tenant of their own, run one ``method`` job on them, and read
    every body about it."""
    admin, reader = _tenant(api)
    dataset = api.upload(rows, name="neighbours", key=admin)
    assert api.budget(dataset["id"], 20.0, key=admin).status_code == 200
    if method == "promptpate":
        public_id = api.upload_public(key=admin)["id"]
        response = api.submit_pate(dataset["id"], public_id, key=admin)
    elif method == "promptdpsgd":
        params = {"steps": 2, "batch_size": 2, "prompt_length": 2}
        response = api.submit(dataset["id"], 4.0, key=admin, method=method, params=params)
    else:
        response = api.submit(dataset["id"], 4.0, key=admin, method=method, params=FAST_PARAMS)
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    if method == "promptdpsgd":
        api.run_worker(job_id, api.backend)  # the tiny model (dpsgd_api)
    else:
        api.run_job(job_id)
    job = _get(api, f"/v1/jobs/{job_id}", admin)
    assert job["status"] == "succeeded", job
    return {
        "submitted": response.json(),
        "job": job,
        "prompt": _get(api, f"/v1/prompts/{job['prompt_id']}", reader),
        "prompts": _get(api, f"/v1/prompts?dataset_id={dataset['id']}", reader),
        "budget": _get(api, f"/v1/datasets/{dataset['id']}/budget", admin),
    }


@pytest.fixture
def dpsgd_api(sqlite_url: str) -> Iterator[Api]:
    """The service with the tiny real model behind it (PromptDPSGD needs gradients)."""
    from app.promptdpsgd.train import freeze
    from tests.promptdpsgd.tiny import tiny_backend

    backend = tiny_backend()
    freeze(backend)
    for api in make_api(sqlite_url, StaticProvider(backend)):
        api.backend = backend  # type: ignore[assignment]  # what run_worker runs on
        yield api


@pytest.mark.parametrize("method", ["tang", "adadpsyn", "promptpate", "promptdpsgd"])
def test_neighbouring_datasets_give_the_same_job_but_for_its_dp_outputs(
    request: pytest.FixtureRequest, method: str, released: list[dict[str, int]]
) -> None:
    api: Api = request.getfixturevalue("dpsgd_api" if method == "promptdpsgd" else "api")
    seen = {name: _run(api, method, rows) for name, rows in _neighbours().items()}
    for name in ("D minus one", "D relabelled"):
        assert _lines(seen[name]) == _lines(seen["D"]), name
    body = seen["D"]["job"]
    if method == "promptpate":
        assert released == [] and body["counts"] is None  # reads no count
    else:
        assert body["counts"] == "released"
        # the release read the exact counts, which did differ between the neighbours (a
        # relabelled record changes two label counts; the dataset's release is per label for
        # every method that reads counts)
        assert len(released) == 3, released  # one per dataset: charged once each
        assert released[0] != released[1] and released[0] != released[2], released
        assert seen["D"]["budget"]["count_releases"], "the budget shows its release"
    # and nothing compared equal by accident of emptiness: the job has a charge and a prompt
    assert body["charged_epsilon"] > 0 and seen["D"]["prompt"]["delta"] == body["delta"]


def test_the_comparison_sees_a_count_that_leaks(
    api: Api, released: list[dict[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: a release that passes the exact counts through makes the neighbours'
    jobs differ (in the plan's noise and sampling), so the comparison above can fail."""

    del released  # replaced: a release that gives the exact counts
    _patch_release(monkeypatch, lambda exact: {k: float(v) for k, v in exact.items()})
    bodies = {name: _run(api, "tang", rows) for name, rows in _neighbours().items()}
    assert _strip(bodies["D minus one"]) != _strip(bodies["D"])
