"""A method that exists only in the tests is offered and runs end to end.

``Echo`` is defined in ``tests/methods/echo.py`` (a plug-in module that imports from
``app.methods`` alone) and registered here and nowhere else (no edit of ``app/`` or
``workers/`` names it). It plans a privacy event of a kind ``app/privacy`` has no type for
(a Gaussian histogram, built from the primitive ``GaussianEvent`` with its own sensitivity
under each relation), releases demonstrations made of public text only (the task's
label names) and takes one parameter with a default (``repeat``, spelt ``--echo-repeat`` on
the command line) plus the job's shots. The tests show that the registry offers it everywhere:

(a) ``dpsyn synthesize --method echo --echo-repeat 3`` through the CLI app;
(b) the REST API: its name and parameter in the OpenAPI document, a job submitted with its
    params, run by the real worker code (``workers.runner.run_job``), succeeded and charged;
(c) ``dpsyn eval --methods echo --param repeat=3``: the evaluation runs it as a job runs;
(d) the dashboard's job form: it lists the method and its parameter, and submitting the form
    creates its job, which the worker runs;

and that it is gone from each once unregistered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from app.cli import app as cli
from app.methods.params import declare
from app.methods.registry import METHODS, get_method, param_fields, registered
from app.privacy.accounting import Accounting, accountant_for
from app.privacy.events import GaussianEvent, Sensitivity, to_dict
from tests.api.conftest import TOY_TASK, Api, auth, error_of, make_api
from tests.methods.echo import ECHO, NOISE, Echo, EchoConfig
from tests.synthesis.fake_backend import FakeBackend
from tests.ui.test_pages import sign_in

runner = CliRunner()


@pytest.fixture
def echo() -> Iterator[Echo]:
    with registered(ECHO) as method:
        yield method
    assert "echo" not in METHODS


# --- the registry -----------------------------------------------------------------------------


def test_it_is_registered_for_the_block_only(echo: Echo) -> None:
    assert get_method("echo") is echo
    assert param_fields()["repeat"].description() == (
        "echo: Times each label's name is said. Default 2."
    )
    assert param_fields()["repeat"].annotation is int
    assert echo.params.model_validate({"repeat": 3}).model_dump() == {"repeat": 3}


def test_the_registry_refuses_a_second_echo_or_a_clashing_parameter(echo: Echo) -> None:
    from app.methods.registry import register

    with pytest.raises(ValueError, match="already registered"):
        register(Echo())

    class Clash(Echo):
        name = "clash"
        parameters = declare(EchoConfig, ("repeat",), flags={"repeat": "--teachers"})

    with pytest.raises(ValueError, match="--teachers already sets parameter teachers"):
        register(Clash())
    assert "clash" not in METHODS


# --- (a) the command line -----------------------------------------------------------------------


@pytest.fixture
def tickets(tmp_path):
    rows = ["text,category"] + [
        f"secretticket{i} please,{'billing' if i % 2 else 'network'}" for i in range(20)
    ]
    path = tmp_path / "tickets.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


TASK_ARGS = ["--task", "custom", "--labels", "billing,network", "--label-col", "category"]


def test_dpsyn_synthesize_offers_and_runs_it(echo, tickets, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(
        "app.cli.synthesize.make_backend", lambda kind, **kw: FakeBackend(stop_after=2)
    )
    shown = runner.invoke(cli, ["synthesize", "--help"], env={"COLUMNS": "200"})
    assert "--echo-repeat" in shown.output and "tang|adadpsyn|promptpate|promptdpsgd|echo" in (
        shown.output
    )
    assert "echo: Times each label's name is said. Range [1, 5]. Default 2." in shown.output

    out = tmp_path / "echo.json"
    args = ["synthesize", "--data", str(tickets), *TASK_ARGS, "--method", "echo"]
    result = runner.invoke(
        cli, [*args, "--echo-repeat", "3", "--shots", "3", "--epsilon", "2", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["method"] == "echo" and data["event"]["type"] == "gaussian"
    assert [d["text"] for d in data["demonstrations"]] == [
        "echo-billing echo-billing echo-billing",
        "echo-network echo-network echo-network",
        "echo-billing echo-billing echo-billing",
    ]
    assert 0 < data["epsilon"] <= 2.0
    assert "echoing: 3/3 echoes" in result.stderr
    assert "secretticket" not in result.output + out.read_text()

    other = runner.invoke(cli, [*args[:-2], "--method", "tang", "--echo-repeat", "3"])
    assert other.exit_code == 2 and "--echo-repeat are for echo, not tang" in other.stderr
    bounded = runner.invoke(cli, [*args, "--echo-repeat", "9"])
    assert bounded.exit_code == 2 and "repeat" in bounded.stderr


def test_dpsyn_synthesize_forgets_it_once_unregistered(tickets) -> None:
    args = ["synthesize", "--data", str(tickets), *TASK_ARGS, "--method", "echo"]
    gone = runner.invoke(cli, args)
    assert gone.exit_code == 2 and "'echo' is not one of" in gone.output
    assert "--echo-repeat" not in runner.invoke(cli, ["synthesize", "--help"]).output


# --- (b) the REST API with the real worker -------------------------------------------------------


@pytest.fixture
def api(echo, sqlite_url) -> Iterator[Api]:
    """An app created while echo is registered (its OpenAPI document is made from it)."""
    yield from make_api(sqlite_url)


def test_the_api_documents_it(api: Api) -> None:
    schemas = api.client.get("/openapi.json").json()["components"]["schemas"]
    assert "echo" in schemas["JobCreate"]["properties"]["method"]["enum"]
    repeat = schemas["JobParams"]["properties"]["repeat"]
    assert repeat["description"] == "echo: Times each label's name is said. Default 2."
    assert repeat["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 5}
    assert (
        "echo: Demonstrations to echo" in schemas["JobCreate"]["properties"]["shots"]["description"]
    )


def test_a_job_runs_through_the_worker_and_is_charged(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], epsilon=3.0).status_code == 200
    wrong = api.submit(dataset["id"], method="echo", params={"M": 2})
    assert wrong.status_code == 422
    assert (
        "params.M: a parameter of method tang or adadpsyn, not of method echo"
        in (error_of(wrong)["message"])
    )
    too_loud = api.submit(dataset["id"], method="echo", params={"repeat": 6})
    assert too_loud.status_code == 422 and "params.repeat" in error_of(too_loud)["message"]

    submitted = api.submit(dataset["id"], method="echo", shots=3, params={"repeat": 2})
    assert submitted.status_code == 201, submitted.text
    job = submitted.json()
    assert job["method"] == "echo" and job["status"] == "queued" and job["shots"] == 3
    assert job["progress"] == {"done": 0, "total": 3, "unit": "echoes"}
    # Echo plans from the dataset's label counts, as a plug-in may (issue 41): through the
    # dataset's one count release, drawn for this first plan and charged on its own line.
    assert job["counts"] == "released" and job["count_release_id"]
    release_id = job["count_release_id"]
    assert api.queue.enqueued == [job["id"]]

    api.run_worker(job["id"])  # workers.runner.run_job: claim, lease, checks, run, store

    done = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert done["status"] == "succeeded", done
    assert done["progress"] == {"done": 3, "total": 3, "unit": "echoes"}
    assert done["stats"] == {"echoed": 3} and done["summary"] == "3 echoes"
    prompt = api.client.get(f"/v1/prompts/{done['prompt_id']}", headers=auth(api.admin)).json()
    texts = [d["text"] for d in prompt["demonstrations"]]
    assert texts == ["echo-w5 echo-w5", "echo-w7 echo-w7", "echo-w5 echo-w5"]
    budget = api.client.get(f"/v1/datasets/{dataset['id']}/budget", headers=auth(api.admin))
    history = budget.json()["history"]
    assert [(e["kind"], e["job_id"]) for e in history] == [
        ("counts", release_id),
        ("reserve", job["id"]),
        ("commit", job["id"]),
    ]
    histogram = GaussianEvent(NOISE, sensitivity=Sensitivity(add_or_remove=1.0, replace_one=2**0.5))
    assert history[1]["event"] == to_dict(histogram)  # stored as the primitive it is
    # Priced by the accountants as they are (no edit of app/privacy): its sensitivity is 1
    # under add/remove (tight accounting) and sqrt(2) under replace-one (paper accounting).
    unit = GaussianEvent(NOISE)
    tight, paper = accountant_for(Accounting.TIGHT), accountant_for(Accounting.PAPER)
    assert tight.dataset_epsilon(histogram, 1e-6) == tight.dataset_epsilon(unit, 1e-6)
    assert paper.dataset_epsilon(histogram, 1e-6) > paper.dataset_epsilon(unit, 1e-6) * 1.2
    assert TOY_TASK["labels"] == ["w5", "w7"]  # what the demonstrations say
    spent, counts = budget.json()["spent"], budget.json()["counts_epsilon"]
    assert history[0]["epsilon"] == pytest.approx(0.05 * 3.0)  # the release's share
    assert counts == pytest.approx(0.05 * 3.0, rel=2e-3)  # its noise priced (sigma to 0.1%)
    # the tight composition: the job at the budget's delta less the release's; the ledger's
    # one-batch rule (one job after the release) at half the budget's delta less the release's
    jobs_delta = budget.json()["delta"] - history[0]["delta"]
    assert done["epsilon"] < tight.dataset_epsilon(histogram, jobs_delta)
    composed = tight.dataset_epsilon(histogram, jobs_delta) + counts
    assert budget.json()["composed"] == pytest.approx(composed)
    one_batch = budget.json()["delta"] / 2 - history[0]["delta"]
    assert budget.json()["rule"] == "one_batch"
    assert 0 < spent == pytest.approx(tight.dataset_epsilon(histogram, one_batch) + counts)
    # the stored plan read the release's estimates, never the exact counts it was drawn from
    stored = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert stored["count_release_id"] == release_id


# --- (d) the dashboard's job form -------------------------------------------------------------


# --- (c) dpsyn eval ------------------------------------------------------------------------------


def test_dpsyn_eval_runs_it_with_its_parameter(echo, tmp_path, monkeypatch) -> None:
    from tests.eval.test_experiment import EvalFake, _records

    monkeypatch.setattr("app.cli.eval.load_split", lambda dataset, data_dir: _records())
    backend = EvalFake(marker="Question:")
    monkeypatch.setattr("app.cli.eval.make_backend", lambda kind, model, url, dtype: backend)
    args = ["eval", "--dataset", "trec", "--seeds", "1", "--epsilons", "8", "--no-baselines"]
    result = runner.invoke(
        cli,
        [*args, "--out-dir", str(tmp_path), "--methods", "echo", "--echo-repeat", "3"],
    )
    assert result.exit_code == 0, result.output
    assert "| Echo (tests), ε = 8 |" in (tmp_path / "results.md").read_text()
    runs = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert [r["setting"] for r in runs] == ["zero-shot", "echo@8"]
    texts = [d["text"] for d in runs[1]["demonstrations"]]
    assert texts and all(t.split() == [t.split()[0]] * 3 for t in texts)  # repeat 3
    assert 0 < runs[1]["epsilon_charged"] <= 8.0


def test_the_dashboard_form_offers_it_and_submits_its_job(api: Api) -> None:
    dataset = api.upload()
    assert api.budget(dataset["id"], epsilon=3.0).status_code == 200
    csrf = sign_in(api.client, api.admin)
    page = api.client.get(f"/ui/datasets/{dataset['id']}").text
    assert '<option value="echo"' in page
    label = re.search(r'<label class="param" data-methods="echo"[^>]*>', page)
    assert label and "Times each label&#39;s name is said. Default 2." in label.group(0)
    assert 'name="param_repeat"' in page

    form = {
        "csrf": csrf,
        "dataset_id": dataset["id"],
        "method": "echo",
        "epsilon": "1.0",
        "shots": "2",
        "param_repeat": "3",
    }
    response = api.client.post("/ui/jobs", data=form, follow_redirects=False)
    assert response.status_code == 303, response.text
    job_id = response.headers["location"].rsplit("/", 1)[1]
    assert api.queue.enqueued == [job_id]
    api.run_worker(job_id)
    job = api.client.get(f"/v1/jobs/{job_id}", headers=auth(api.admin)).json()
    assert (job["method"], job["status"], job["shots"]) == ("echo", "succeeded", 2)
    prompt = api.client.get(f"/v1/prompts/{job['prompt_id']}", headers=auth(api.admin)).json()
    assert prompt["demonstrations"][0]["text"] == "echo-w5 echo-w5 echo-w5"  # repeat 3


def test_the_api_refuses_it_once_unregistered(sqlite_url) -> None:
    for api in make_api(sqlite_url):
        dataset = api.upload()
        api.budget(dataset["id"], epsilon=3.0)
        gone = api.submit(dataset["id"], method="echo", params={"repeat": 2})
        assert gone.status_code == 422
        assert error_of(gone)["message"] == (
            "method: not a registered method; one of tang, adadpsyn, promptpate, promptdpsgd"
        )
        schemas = api.client.get("/openapi.json").json()["components"]["schemas"]
        assert "echo" not in schemas["JobCreate"]["properties"]["method"]["enum"]
        assert "repeat" not in schemas["JobParams"]["properties"]
        sign_in(api.client, api.admin)
        page = api.client.get(f"/ui/datasets/{dataset['id']}").text
        assert '<option value="echo"' not in page and "param_repeat" not in page


def test_the_walkthrough_says_how_long_echo_is() -> None:
    """docs/service.md's walkthrough gives Echo's length (it said about 140 lines of a
    169-line module, issue 52): the count it states is the module's."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    walkthrough = (root / "docs" / "service.md").read_text(encoding="utf-8")
    stated = re.search(r"it is one module of (\d+) lines", walkthrough)
    assert stated is not None, "the walkthrough no longer states Echo's length"
    lines = (root / "tests" / "methods" / "echo.py").read_text(encoding="utf-8").splitlines()
    assert int(stated.group(1)) == len(lines)
