"""Uploads of the built-in tasks' own file formats through the API and the dashboard's form
(issue 24, item 8): TREC's ``train.txt`` is read as ``dpsyn datasets upload`` reads it, the
dataset is named after its task, and a bad task or a file that does not parse is a 422 that
names the problem (a line number, the allowed tasks) and never the file's text.

The benchmark files are read from the shared data folder at test time, never copied here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.db.models import Dataset, DatasetRecord
from app.db.session import session_scope
from app.services.datasets import load_public_texts, load_records
from app.synthesis.data import load_dataset
from app.synthesis.generator import partition_sizes
from app.synthesis.tasks import BUILTIN_TASKS
from tests.api.conftest import (
    MARKER,
    TEST_READER,
    TOY_TASK,
    Api,
    auth,
    csv_bytes,
    error_of,
    make_api,
    toy_rows,
)
from tests.conftest import require_shared_data

TREC = BUILTIN_TASKS["trec"]
ALLOWED = "agnews, mitd, mitg, sst2, trec"


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def _head(relative: str, lines: int) -> bytes:
    """The first ``lines`` lines of a shared benchmark file (skips or fails if it is absent)."""
    root = require_shared_data(relative)
    with (root / relative).open("rb") as handle:
        return b"".join(next(handle) for _ in range(lines))


def _cli_records(tmp_path: Path, name: str, content: bytes, task: str) -> list:
    """What the command line's converter (``load_dataset`` on the file) makes of it."""
    path = tmp_path / name
    path.write_bytes(content)
    return load_dataset(BUILTIN_TASKS[task], path)


def _post(api: Api, filename: str, content: bytes, **data: str):
    return api.client.post(
        "/v1/datasets", files={"file": (filename, content)}, data=data, headers=auth(api.admin)
    )


def _questions(content: bytes) -> list[str]:
    """The TREC questions of ``content`` (private text: none may appear in a response)."""
    return [line.split(" ", 1)[1].strip() for line in content.decode().splitlines()]


def _stored(api: Api) -> tuple[int, int]:
    with session_scope(api.url) as session:
        datasets = session.scalar(select(func.count()).select_from(Dataset)) or 0
        records = session.scalar(select(func.count()).select_from(DatasetRecord)) or 0
    return datasets, records


def test_trec_train_txt_through_the_api_is_converted_as_the_cli_does(
    api: Api, tmp_path: Path
) -> None:
    sample = _head("trec/train.txt", 60)
    response = _post(api, "train.txt", sample, task="trec")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["name"] == "trec" and body["task"]["name"] == "trec"  # not "train"
    expected = _cli_records(tmp_path, "train.txt", sample, "trec")
    assert body["record_count"] == len(expected) == 60
    assert body["label_counts"] == partition_sizes(TREC, expected)
    with session_scope(api.url) as session:
        opened = load_records(session, body["id"], TEST_READER)
    assert opened == expected  # same texts, labels and order
    assert not any(question in response.text for question in _questions(sample))
    again = _post(api, "train.txt", sample, task="TREC", name="questions")
    assert again.status_code == 409 and again.json()["error"]["code"] == "records_seen"
    # the same records again: only on the budget they already have (budget_of, by name too)
    named = _post(api, "train.txt", sample, task="TREC", name="questions", budget_of="trec")
    assert named.status_code == 201 and named.json()["name"] == "questions"
    assert named.json()["budget_dataset_id"] == body["id"]


def test_other_builtin_formats_and_a_table_for_agnews_still_a_table(
    api: Api, tmp_path: Path
) -> None:
    sst2 = _head("sst2/stsa.binary.train", 20)
    # 80 lines: the file opens with 78 Business stories; one label alone is refused (issue 55)
    agnews = _head("agnews/train_first10429.csv", 80)
    for name, content, task in (
        ("stsa.binary.train", sst2, "sst2"),
        ("train.csv", agnews, "agnews"),
    ):
        response = _post(api, name, content, task=task)
        assert response.status_code == 201, response.text
        expected = _cli_records(tmp_path, name, content, task)
        assert response.json()["name"] == task
        assert response.json()["label_counts"] == partition_sizes(BUILTIN_TASKS[task], expected)
    # An AG News CSV whose header names the columns is read as the table it is.
    rows = [{"text": f"{MARKER} story {i}", "label": "Sports" if i else "World"} for i in range(3)]
    table = _post(api, "stories.csv", csv_bytes(rows), task="agnews")
    assert table.status_code == 201, table.text
    assert table.json()["label_counts"]["Sports"] == 2 and table.json()["record_count"] == 3


def test_public_uploads_of_a_task_format_and_of_plain_text_lines(api: Api) -> None:
    sst2 = _head("sst2/stsa.binary.train", 10)
    own = _post(api, "stsa.binary.train", sst2, task="sst2", public="true")
    assert own.status_code == 201, own.text
    assert own.json()["kind"] == "public" and own.json()["record_count"] == 10
    # For AG News a public CSV is a table when its header names the text column alone.
    agnews_table = _post(
        api, "news.csv", b"text\nsome news\nmore news\n", task="agnews", public="true"
    )
    assert agnews_table.status_code == 201, agnews_table.text
    assert agnews_table.json()["record_count"] == 2
    agnews = _post(
        api, "train.csv", _head("agnews/train_first10429.csv", 5), task="agnews", public="true"
    )
    assert agnews.status_code == 201 and agnews.json()["record_count"] == 5, agnews.text
    lines = b"first public text\n\nsecond public text\n"
    plain = _post(api, "texts.txt", lines, public="true")
    assert plain.status_code == 201, plain.text
    assert plain.json()["name"] == "texts" and plain.json()["record_count"] == 2
    with session_scope(api.url) as session:
        assert load_public_texts(session, plain.json()["id"], TEST_READER) == [
            "first public text",
            "second public text",
        ]


def test_bad_task_names_the_allowed_values_and_stores_nothing(api: Api) -> None:
    sample = _head("trec/train.txt", 10)
    unknown = _post(api, "train.txt", sample, task="trek")
    assert unknown.status_code == 422
    assert "unknown built-in task 'trek'" in error_of(unknown)["message"]
    assert ALLOWED in error_of(unknown)["message"]
    missing = _post(api, "train.txt", sample)
    assert missing.status_code == 422
    assert error_of(missing)["message"].startswith("task: required")
    assert ALLOWED in error_of(missing)["message"]
    custom = _post(api, "train.txt", sample, task='{"name": "x"}')
    assert custom.status_code == 422  # an invalid spec, refused before the file is read
    toy = _post(api, "train.txt", sample, task=json.dumps(TOY_TASK))
    assert toy.status_code == 422  # a custom task has no format of its own
    message = error_of(toy)["message"]
    assert "cannot tell the format of 'train.txt'" in message
    assert "task=agnews|mitd|mitg|sst2|trec" in message
    assert _stored(api) == (0, 0)
    for response in (unknown, missing, custom, toy):
        assert not any(question in response.text for question in _questions(sample))


def test_a_file_that_does_not_parse_names_the_line_never_its_text(api: Api) -> None:
    kept = api.upload()  # stored before: a bad upload must not touch it
    before = _stored(api)
    sample = _head("trec/train.txt", 10)
    lines = sample.decode().splitlines(keepends=True)
    lines.insert(6, f"{MARKER} has no coarse label here\n")
    broken = "".join(lines).encode()
    response = _post(api, "train.txt", broken, task="trec")
    assert response.status_code == 422
    message = error_of(response)["message"]
    assert "line 7 is not 'COARSE:fine question'" in message and "train.txt" in message
    assert "own format" in message  # says how the file was read, and how to read a table
    wrong_task = _post(api, "train.txt", sample, task="sst2")
    assert wrong_task.status_code == 422
    assert "line 1 is not 'label sentence'" in error_of(wrong_task)["message"]
    bad_label = _post(
        api, "train.txt", b"ABBR:exp What is it ?\nXYZ:foo " + MARKER.encode() + b"\n", task="trec"
    )
    assert bad_label.status_code == 422
    assert "record 2" in error_of(bad_label)["message"]
    for bad in (response, wrong_task, bad_label):
        assert MARKER not in bad.text
        assert not any(question in bad.text for question in _questions(sample))
    assert _stored(api) == before
    with session_scope(api.url) as session:
        assert len(load_records(session, kept["id"], TEST_READER)) == kept["record_count"]


# --- the dashboard's upload form -------------------------------------------------------------


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


def _sign_in(client: TestClient, key: str) -> str:
    """Sign in to the dashboard; the session's CSRF token (the datasets page's form)."""
    page = client.get("/ui/login")
    form = {"csrf": _csrf(page.text), "api_key": key}
    assert client.post("/ui/login", data=form, follow_redirects=False).status_code == 303
    return _csrf(client.get("/ui/datasets").text)


def test_trec_train_txt_through_the_dashboard_form(api: Api, tmp_path: Path) -> None:
    client = api.client
    csrf = _sign_in(client, api.admin)
    assert 'accept=".csv' not in client.get("/ui/datasets").text  # any file can be chosen
    sample = _head("trec/train.txt", 40)
    # The form sends its prefilled columns; a TREC file is read in TREC's format regardless.
    form = {
        "csrf": csrf,
        "task": "trec",
        "name": "",
        "text_column": "text",
        "label_column": "label",
    }
    uploaded = client.post(
        "/ui/datasets/upload",
        data=form,
        files={"file": ("train.txt", sample, "text/plain")},
        follow_redirects=False,
    )
    assert uploaded.status_code == 303, uploaded.text
    dataset_id = uploaded.headers["location"].rsplit("/", 1)[1]
    got = client.get(f"/v1/datasets/{dataset_id}", headers=auth(api.admin)).json()
    assert got["name"] == "trec" and got["record_count"] == 40
    expected = _cli_records(tmp_path, "train.txt", sample, "trec")
    assert got["label_counts"] == partition_sizes(TREC, expected)
    page = client.get(f"/ui/datasets/{dataset_id}").text
    assert "trec" in page and not any(q in page for q in _questions(sample))

    bad_task = client.post(
        "/ui/datasets/upload",
        data={**form, "task": "trek"},
        files={"file": ("train.txt", sample, "text/plain")},
    )
    assert bad_task.status_code == 422 and ALLOWED in bad_task.text
    broken = sample + f"{MARKER} no label\n".encode()
    unparsable = client.post(
        "/ui/datasets/upload", data=form, files={"file": ("train.txt", broken, "text/plain")}
    )
    assert unparsable.status_code == 422 and "line 41" in unparsable.text
    assert MARKER not in unparsable.text
    assert not any(q in unparsable.text for q in _questions(sample))
    listed = client.get("/v1/datasets", headers=auth(api.admin)).json()
    assert [d["id"] for d in listed] == [dataset_id]  # the refused uploads stored nothing


def test_a_public_imdb_like_upload_keeps_its_markup_until_a_pate_job_cleans_it(api: Api) -> None:
    """Stored as given (a public dataset's texts are the user's); the PATE job path cleans
    them before teachers or student see them (``run_pate``), checked end to end here."""
    rows = [
        {"text": f"PUBLICTEXT{i} one<br /><br />two" + (" three four" if i % 2 == 0 else "")}
        for i in range(40)
    ]
    public = api.upload_public(rows)
    private = api.upload(toy_rows())
    api.budget(private["id"], 5.0)
    job = api.submit_pate(private["id"], public["id"]).json()
    from tests.synthesis.fake_backend import FakeBackend

    backend = FakeBackend(stop_after=None)
    api.run_worker(job["id"], backend)
    done = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert done["status"] == "succeeded", done
    prompts = [backend.detokenize(p) for _, batch in backend.calls for p in batch]
    assert any("PUBLICTEXT" in p for p in prompts)
    assert not any("<br" in p for p in prompts)
    prompt = api.client.get(f"/v1/prompts/{done['prompt_id']}", headers=auth(api.reader)).json()
    assert prompt["demonstrations"]
    assert all("<br" not in d["text"] and " one two" in d["text"] for d in prompt["demonstrations"])


def test_a_labelled_public_upload_through_the_dashboard_form(api: Api) -> None:
    """The form's "Public with labels" box makes a validation set (labels kept); without it a
    public upload is texts only."""
    client = api.client
    csrf = _sign_in(client, api.admin)
    assert 'name="labelled"' in client.get("/ui/datasets").text
    sample = _head("trec/train.txt", 40)
    form = {"csrf": csrf, "task": "trec", "name": "", "public": "on"}
    ids = {}
    for labelled in (True, False):
        data = {**form, "labelled": "on"} if labelled else form
        uploaded = client.post(
            "/ui/datasets/upload",
            data=data,
            files={"file": ("train.txt", sample, "text/plain")},
            follow_redirects=False,
        )
        assert uploaded.status_code == 303, uploaded.text
        ids[labelled] = uploaded.headers["location"].rsplit("/", 1)[1]
    for labelled, dataset_id in ids.items():
        got = client.get(f"/v1/datasets/{dataset_id}", headers=auth(api.admin)).json()
        assert got["kind"] == "public" and got["labelled"] is labelled
