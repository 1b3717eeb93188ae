"""Demonstrations left out say so (issue 55.8): a Tang job asked for 4 demonstrations served 1
(1 label echo, 2 too short) and its prompt, job page and CLI said nothing. Now the job's and
the prompt's JSON carry ``demonstrations_requested``, ``demonstrations_served`` and
``demonstrations_dropped`` (by reason), the job's summary (its page, ``dpsyn jobs show`` and
``wait``) says how many it serves and why, and the prompt's notes that the privacy of every
requested demonstration was charged: what the ledger holds is the plan of all of them.

The drops are real: the job runs through the worker (``workers.runner.run_job``) with a
``min_words`` its fake model's short texts never reach, so every demonstration fails the
text checks (a one-word one, a label's name, as ``label_echo``; the rest ``too_short``)."""

from __future__ import annotations

from typing import Any

from app.db.models import Job, LedgerEntry, LedgerKind
from app.db.session import session_scope
from app.methods.registry import get_method
from app.methods.token_loop import NOT_REGENERATED
from app.privacy.events import to_dict
from app.services.rows import stored_plan
from app.synthesis.tasks import TaskSpec
from tests.api.conftest import FAST_PARAMS, TOY_TASK, Api, auth
from tests.synthesis.fake_backend import FakeBackend
from tests.ui.test_pages import sign_in

SHOTS = 4


def _get(api: Api, path: str) -> dict[str, Any]:
    response = api.client.get(path, headers=auth(api.admin))
    assert response.status_code == 200, response.text
    return response.json()


def _run(api: Api, min_words: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A funded tang job of :data:`SHOTS` run by the real worker: its JSON and its prompt's."""
    dataset = api.upload()
    assert api.budget(dataset["id"], 10.0).status_code == 200
    params = {**FAST_PARAMS, "min_words": min_words}
    job = api.submit(dataset["id"], epsilon=2.0, shots=SHOTS, params=params).json()
    api.run_job(job["id"])
    done = _get(api, f"/v1/jobs/{job['id']}")
    return done, _get(api, f"/v1/prompts/{done['prompt_id']}")


def test_a_job_whose_demonstrations_fail_the_text_checks_says_how_many_it_serves(
    api: Api,
) -> None:
    job, prompt = _run(api, min_words=50)  # the fake writes at most tmax (4) words
    dropped = job["demonstrations_dropped"]
    assert job["demonstrations_requested"] == SHOTS and job["demonstrations_served"] == 0
    assert set(dropped) <= {"label_echo", "too_short"} and sum(dropped.values()) == SHOTS
    # the stats the counts come from, under the names the generator counts them by
    stats = job["stats"]
    assert dropped.get("too_short", 0) == stats.get("short_demonstrations", 0)
    assert dropped.get("label_echo", 0) == stats.get("echo_demonstrations", 0)

    assert prompt["demonstrations"] == []
    assert prompt["demonstrations_requested"] == SHOTS
    assert prompt["demonstrations_served"] == 0 and prompt["demonstrations_dropped"] == dropped
    assert NOT_REGENERATED.format(planned=SHOTS) in prompt["notes"]

    summary = job["summary"]
    assert summary.startswith(f"serves 0 of the {SHOTS} demonstrations asked for (")
    if "too_short" in dropped:
        assert f"{dropped['too_short']} came out shorter than 50 words" in summary
    assert f"the privacy cost is that of all {SHOTS}" in summary

    sign_in(api.client, api.admin)  # the job's dashboard page shows the summary
    page = api.client.get(f"/ui/jobs/{job['id']}")
    assert page.status_code == 200
    assert f"serves 0 of the {SHOTS} demonstrations asked for" in page.text


def test_the_ledger_charges_every_requested_demonstration(api: Api) -> None:
    job, _ = _run(api, min_words=50)
    assert job["demonstrations_served"] == 0
    with session_scope(api.url) as session:
        row = session.get(Job, job["id"])
        assert row is not None
        entries = session.query(LedgerEntry).filter_by(job_id=job["id"]).all()
        plan = get_method("tang").rebuild(TaskSpec.model_validate(TOY_TASK), stored_plan(row))
        planned = plan.plan  # type: ignore[attr-defined]
        event, epsilon = to_dict(planned.event()), planned.epsilon()
        charged_shots = sum(planned.charged().values())
    kinds = {entry.kind: entry for entry in entries}
    assert set(kinds) == {LedgerKind.RESERVE, LedgerKind.COMMIT}
    commit = kinds[LedgerKind.COMMIT]
    # what the ledger charges is the plan of all requested demonstrations, none served
    assert charged_shots == SHOTS
    reserved = kinds[LedgerKind.RESERVE].event
    assert reserved == event and {k: v for k, v in commit.event.items() if k != "reason"} == event
    assert commit.epsilon == epsilon == job["epsilon"] == job["charged_epsilon"]


def test_a_job_that_serves_every_demonstration_says_nothing_more(api: Api) -> None:
    job, prompt = _run(api, min_words=1)
    served = len(prompt["demonstrations"])
    dropped = job["demonstrations_dropped"]
    assert job["demonstrations_requested"] == SHOTS == served + sum(dropped.values())
    assert job["demonstrations_served"] == served == prompt["demonstrations_served"]
    if not dropped:  # a one-word label echo may still be left out (the noise decides)
        assert job["summary"] is None and prompt["notes"] == []


def test_methods_without_planned_demonstrations_have_no_counts(api: Api) -> None:
    dataset = api.upload()
    public = api.upload_public()
    assert api.budget(dataset["id"], 10.0).status_code == 200
    job = api.submit_pate(dataset["id"], public["id"]).json()
    api.run_worker(job["id"], FakeBackend(stop_after=None))
    done = _get(api, f"/v1/jobs/{job['id']}")
    assert done["status"] == "succeeded", done
    assert done["demonstrations_requested"] is None and done["demonstrations_dropped"] == {}
    prompt = _get(api, f"/v1/prompts/{done['prompt_id']}")
    assert prompt["demonstrations_requested"] is None
