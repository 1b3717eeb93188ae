"""Uploads that say what is wrong with them (issue 55, item 2): the same column as text and
label, a classification file with one label, a declared label without records, rows with an
extra field, and a second dataset under a name in use. Each refusal is a 4xx naming the
column, label, rows or name (never a record's text: every text here carries ``MARKER``,
which the client checks no response holds), and leaves what was stored as it was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.db.session import session_scope
from app.services.datasets import record_count
from tests.api.conftest import MARKER, TOY_TASK, Api, auth, error_of, make_api, toy_rows


@pytest.fixture
def api(sqlite_url: str) -> Iterator[Api]:
    yield from make_api(sqlite_url)


def _post_csv(api: Api, body: str, **fields: str):
    return api.client.post(
        "/v1/datasets",
        files={"file": ("tickets.csv", body.encode(), "text/csv")},
        data={"task": "sst2", **fields},
        headers=auth(api.admin),
    )


def _stored(api: Api) -> list[tuple[str, str, int, int]]:
    """Every live dataset of the tenant: ID, name, record count, rows in the records table."""
    rows = api.client.get("/v1/datasets", headers=auth(api.admin)).json()
    with session_scope(api.url) as session:
        return [
            (r["id"], r["name"], r["record_count"], record_count(session, r["id"])) for r in rows
        ]


def _refused(api: Api, response) -> str:
    """The 422's message, once checked that nothing was stored."""
    assert response.status_code == 422, response.text
    assert _stored(api) == []
    return error_of(response)["message"]


def _sentences(n: int, label: str = "") -> str:
    """CSV rows ``text,label``: texts of their own, labels alternating unless ``label``."""
    return "".join(
        f"{MARKER} sentence {i},{label or ('positive' if i % 2 else 'negative')}\n"
        for i in range(n)
    )


def test_the_same_column_as_text_and_label_is_refused_naming_it(api: Api) -> None:
    body = "label,text\n" + "".join(f"negative,{MARKER} {i}\n" for i in range(40))
    response = _post_csv(api, body, text_column="label", label_column="label")
    message = _refused(api, response)
    assert "'label'" in message and "both" in message and "text column" in message


def test_texts_that_are_their_labels_are_refused(api: Api) -> None:
    """The label column copied under another name: 40 records whose text is their label."""
    body = "sentence,sentiment\n" + "".join(
        f"{'positive' if i % 2 else 'negative'},{'positive' if i % 2 else 'negative'}\n"
        for i in range(40)
    )
    response = _post_csv(api, body, text_column="sentence", label_column="sentiment")
    message = _refused(api, response)
    assert "all 40 records" in message and "'sentence'" in message and "'sentiment'" in message


def test_a_private_file_with_one_label_is_refused_naming_it(api: Api) -> None:
    response = _post_csv(api, "text,label\n" + _sentences(24, "positive"))
    message = _refused(api, response)
    assert "all 24 records" in message and "'positive'" in message
    assert "'negative'" in message  # the label without records, from the task


def test_a_validation_set_with_one_label_is_kept_with_a_warning(api: Api) -> None:
    response = _post_csv(
        api, "text,label\n" + _sentences(10, "positive"), public="true", labelled="true"
    )
    assert response.status_code == 201, response.text
    warnings = response.json()["warnings"]
    assert any("'positive'" in w and "all 10 records" in w for w in warnings), warnings


def test_a_declared_label_without_records_is_a_warning_naming_it(api: Api) -> None:
    task = {**TOY_TASK, "labels": ["w5", "w7", "w9", "w11"]}
    dataset = api.upload(toy_rows(6), task=task)  # w5 and w7 only
    assert dataset["label_counts"] == {"w5": 6, "w7": 6, "w9": 0, "w11": 0}
    (warning,) = dataset["warnings"]
    assert "'w9'" in warning and "'w11'" in warning and "no records" in warning
    assert "'w5'" not in warning
    shown = api.client.get(f"/v1/datasets/{dataset['id']}", headers=auth(api.admin)).json()
    assert shown["warnings"] == dataset["warnings"]  # the data is kept, and so is the warning
    complete = api.upload(task=TOY_TASK)
    assert complete["warnings"] == []


def test_rows_with_an_extra_field_are_refused_naming_their_lines(api: Api) -> None:
    rows = [f"{MARKER} fine {i},positive\n" for i in range(12)]
    rows[2] = f"{MARKER} a comma, unquoted,negative\n"  # line 4
    rows[6] = f"{MARKER} two, commas, here,negative\n"  # line 8
    rows[9] = f"{MARKER} again, one,positive\n"  # line 11
    response = _post_csv(api, "text,label\n" + "".join(rows))
    message = _refused(api, response)
    assert "3 rows" in message and "2 columns" in message
    assert "line 4 (3 fields)" in message and "line 8 (4 fields)" in message
    assert "line 11 (3 fields)" in message


def test_public_rows_with_an_extra_field_are_refused_too(api: Api) -> None:
    body = "text,id\n" + f"{MARKER} one,1\n{MARKER} two, three,2\n"
    response = _post_csv(api, body, public="true")
    assert response.status_code == 422, response.text
    assert "line 3 (3 fields)" in error_of(response)["message"]


def test_a_name_in_use_is_refused_and_every_name_command_keeps_working(api: Api) -> None:
    first = api.upload(name="tickets")
    response = api.client.post(
        "/v1/datasets",
        json={"task": TOY_TASK, "records": toy_rows(), "name": "tickets"},
        headers=auth(api.admin),
    )
    assert response.status_code == 409, response.text
    error = error_of(response)
    assert error["code"] == "name_taken"
    assert "'tickets'" in error["message"] and first["id"] in error["message"]
    assert _stored(api) == [(first["id"], "tickets", 24, 24)]
    by_name = api.client.get("/v1/datasets/tickets", headers=auth(api.admin))
    assert by_name.status_code == 200 and by_name.json()["id"] == first["id"]
    # a public upload shares the names: a job's public_dataset_id takes them too
    public = api.client.post(
        "/v1/datasets",
        json={"public": True, "name": "tickets", "records": [{"text": "a"}]},
        headers=auth(api.admin),
    )
    assert public.status_code == 409 and error_of(public)["code"] == "name_taken"


def test_names_are_per_tenant_and_free_again_once_deleted(api: Api) -> None:
    mine = api.upload(name="tickets")
    theirs = api.upload(name="tickets", key=api.other)
    assert theirs["name"] == "tickets"
    deleted = api.client.delete(f"/v1/datasets/{mine['id']}", headers=auth(api.admin))
    assert deleted.status_code == 200
    again = api.upload(name="tickets")
    assert again["name"] == "tickets" and again["id"] != mine["id"]
    by_name = api.client.get("/v1/datasets/tickets", headers=auth(api.admin))
    assert by_name.json()["id"] == again["id"]


def test_a_default_name_in_use_takes_the_next_free_number(api: Api) -> None:
    """Not given, the name is the task's: a second upload for the task is named ``toy-2``
    (said in the response), so that the name always reaches one dataset."""
    names = [api.upload()["name"] for _ in range(3)]
    assert names == ["toy", "toy-2", "toy-3"]
    for name in names:
        assert api.client.get(f"/v1/datasets/{name}", headers=auth(api.admin)).status_code == 200


def test_every_refusal_leaves_what_was_stored_as_it_was(api: Api) -> None:
    kept = api.upload(name="tickets")
    before = _stored(api)
    refusals = [
        _post_csv(api, "label\n" + "negative\n" * 8, text_column="label", label_column="label"),
        _post_csv(api, "text,label\n" + _sentences(8, "negative")),
        _post_csv(api, "text,label\n" + _sentences(4) + f"{MARKER} x, y,positive\n"),
        _post_csv(api, "text,label\n" + _sentences(8), name="tickets"),
    ]
    assert [r.status_code for r in refusals] == [422, 422, 422, 409]
    assert _stored(api) == before and before[0][0] == kept["id"]


def test_the_dashboard_upload_shows_the_warning_on_the_dataset_page(api: Api) -> None:
    from tests.ui.test_pages import sign_in

    csrf = sign_in(api.client, api.admin)
    uploaded = api.client.post(
        "/ui/datasets/upload",
        data={"csrf": csrf, "task": "trec", "name": "questions"},
        files={
            "file": (
                "q.csv",
                ("text,label\n" + _sentences(6, "LOC") + _sentences(3, "NUM")).encode(),
            )
        },
        follow_redirects=False,
    )
    assert uploaded.status_code == 303, uploaded.text
    page = api.client.get(uploaded.headers["location"]).text
    assert 'id="dataset-warning-1"' in page
    assert "no records for label(s) &#39;Abbreviation&#39;, &#39;Entity&#39;" in page


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_an_upload_that_loses_the_race_for_a_name_is_409(
    db: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another upload takes the name between the check and the insert (simulated: the check
    sees no dataset once): the database's unique index refuses the insert, and the answer is
    the same 409 naming the dataset, with nothing of the loser stored."""
    from app.services import upload_checks

    url = request.getfixturevalue("sqlite_url" if db == "sqlite" else "postgres_url")
    for api in make_api(url):
        first = api.upload(name="tickets")
        real, blind = upload_checks._live_names, iter([True])

        def blind_once(*args: object, _blind: Iterator[bool] = blind, _real=real) -> object:
            return {} if next(_blind, False) else _real(*args)

        monkeypatch.setattr(upload_checks, "_live_names", blind_once)
        response = api.client.post(
            "/v1/datasets",
            json={"task": TOY_TASK, "records": toy_rows(), "name": "tickets"},
            headers=auth(api.admin),
        )
        assert response.status_code == 409, response.text
        error = error_of(response)
        assert error["code"] == "name_taken" and first["id"] in error["message"]
        assert _stored(api) == [(first["id"], "tickets", 24, 24)]
