"""dpsyn_client (clients/python), the downstream apps' client, against the real app
(FastAPI's TestClient is an ``httpx.Client``, so the client's requests go through the real
routes, keys and caches).

Every exchange is recorded on the wire (an httpx response hook): the tests check what the
client sent (``If-None-Match``) and what came back (304 or 200), not only what it returned.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dpsyn_client.chat import chat_messages
from dpsyn_client.client import ApiError, NoChatFormError, PromptClient, UnreachableError
from fastapi.testclient import TestClient

from app.db.migrate import upgrade
from app.db.models import PromptSet
from app.db.session import session_scope
from app.services.prompts import pending_validation, record_validation
from tests.api.conftest import Api, auth, make_api
from tests.api.test_prompt_messages import Prompts, make_prompts
from tests.cli.live_server import free_port

ROOT = Path(__file__).resolve().parents[1]
Exchange = tuple[str, str, str | None, int]  # method, path, If-None-Match sent, status


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prompts]:
    """A classification, an extraction and a soft prompt on one app for the module."""
    url = f"sqlite:///{tmp_path_factory.mktemp('client') / 'dpsyn.db'}"
    upgrade(url)
    for api in make_api(url):
        yield make_prompts(api)


@pytest.fixture
def wire(prompts: Prompts) -> Iterator[tuple[TestClient, list[Exchange]]]:
    """An httpx client on the module's app that records each exchange."""
    seen: list[Exchange] = []

    def record(response: httpx.Response) -> None:
        request = response.request
        seen.append(
            (
                request.method,
                request.url.path,
                request.headers.get("if-none-match"),
                response.status_code,
            )
        )

    http = TestClient(prompts.api.client.app)  # the app is already started by the module's
    http.event_hooks = {"request": [], "response": [record]}
    yield http, seen


def client_of(api: Api, http: TestClient, key: str | None = None, **kw: object) -> PromptClient:
    return PromptClient("http://testserver/v1", key or api.reader, http=http, **kw)  # type: ignore[arg-type]


def test_get_prompt_revalidates_with_the_etag_and_reuses_the_body_on_304(
    prompts: Prompts, wire
) -> None:
    http, seen = wire
    client = client_of(prompts.api, http)
    path = f"/v1/prompts/{prompts.classification}"
    first = client.get_prompt(prompts.classification)
    assert seen == [("GET", path, None, 200)]
    direct = prompts.api.client.get(path, headers=auth(prompts.api.reader))
    assert first.data == direct.json() and first.etag == direct.headers["etag"]
    assert first.id == prompts.classification and first.text == direct.json()["prompt"]
    again = client.get_prompt(prompts.classification)
    assert seen[1:] == [("GET", path, first.etag, 304)]  # the tag went out, no body came back
    assert again is first


def test_a_changed_prompt_is_refetched(prompts: Prompts, wire) -> None:
    """A prompt whose validation score is pending, then written: the revalidation gets the
    new body (200 with a new ETag), which replaces the kept one; then 304 again."""
    api = prompts.api
    dataset = api.upload()
    assert api.budget(dataset["id"], 3.0).status_code == 200
    job = api.submit(dataset["id"]).json()
    api.run_job(job["id"])
    prompt_id = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()["prompt_id"]
    with session_scope(api.url) as session:  # no read yet, so the server has not cached it
        row = session.get(PromptSet, prompt_id)
        assert row is not None
        row.validation = pending_validation(dataset["id"])
    http, seen = wire
    client = client_of(api, http)
    pending = client.get_prompt(prompt_id)
    assert pending.data["validation"]["status"] == "pending"
    with session_scope(api.url) as session:
        assert record_validation(
            session, prompt_id, {"n": 10, "accuracy": 0.7, "baselines": {"zero_shot": 0.5}}
        )
    scored = client.get_prompt(prompt_id)
    assert seen[-1] == ("GET", f"/v1/prompts/{prompt_id}", pending.etag, 200)
    assert scored.etag != pending.etag and scored.data["validation"]["accuracy"] == 0.7
    assert client.get_prompt(prompt_id) is scored and seen[-1][2:] == (scored.etag, 304)


def test_messages_alternate_and_equal_the_apis_format_messages(prompts: Prompts, wire) -> None:
    http, _ = wire
    client = client_of(prompts.api, http)
    for prompt_id in (prompts.classification, prompts.extraction):
        prompt = client.get_prompt(prompt_id)
        messages = client.messages(prompt_id)
        demos = prompt.demonstrations
        assert [m["role"] for m in messages] == ["system"] + ["user", "assistant"] * len(demos)
        field = prompt.task_spec["text_field"]
        assert [m["content"] for m in messages[1::2]] == [f"{field}: {d['text']}" for d in demos]
        assert [m["content"] for m in messages[2::2]] == [d["label"] for d in demos]
        api = prompts.api.client.get(
            f"/v1/prompts/{prompt_id}?format=messages", headers=auth(prompts.api.reader)
        )
        assert api.json()["messages"] == messages == chat_messages(prompt.data)
        with_query = client.messages(prompt_id, "a new film")
        assert with_query[:-1] == messages
        assert with_query[-1] == {"role": "user", "content": f"{field}: a new film"}


def test_a_soft_prompt_is_read_but_has_no_messages(prompts: Prompts, wire) -> None:
    http, _ = wire
    client = client_of(prompts.api, http)
    prompt = client.get_prompt(prompts.soft)
    assert prompt.is_soft_prompt and prompt.data["soft_prompt"]["model"] == "fake"
    with pytest.raises(NoChatFormError, match="soft prompt"):
        client.messages(prompts.soft)


def test_complete_answers_as_the_api_does(prompts: Prompts, wire) -> None:
    http, seen = wire
    client = client_of(prompts.api, http)
    answer = client.complete(prompts.classification, "is it w5")  # the fake predicts w5
    assert answer["prompt_id"] == prompts.classification and answer["label"] == "w5"
    assert set(answer["scores"]) == {"w5", "w7"} and answer["calibration"] == "none"
    assert client.complete(prompts.extraction, "a funny film")["kind"] == "extraction"
    assert [s[3] for s in seen] == [200, 200]
    calibrated = client.complete(prompts.classification, "is it w5", calibrated=True)
    assert calibrated["calibration"] == "contextual"
    with pytest.raises(ApiError) as raised:
        client.complete(prompts.classification, "")
    assert raised.value.status == 422 and raised.value.code == "invalid"
    assert raised.value.details["fields"][0]["field"] == "query"


def test_a_new_prompts_read_key_works(prompts: Prompts, wire) -> None:
    api = prompts.api
    created = api.client.post("/v1/keys", json={"scope": "prompts:read"}, headers=auth(api.admin))
    assert created.status_code == 201, created.text
    http, _ = wire
    client = client_of(api, http, key=created.json()["key"])
    assert client.get_prompt(prompts.classification).id == prompts.classification
    assert client.complete(prompts.classification, "is it w5")["label"] == "w5"


def test_errors_carry_the_status_code_and_message(prompts: Prompts, wire) -> None:
    http, seen = wire
    wrong = client_of(prompts.api, http, key="not-a-key")
    with pytest.raises(ApiError) as raised:
        wrong.get_prompt(prompts.classification)
    error = raised.value
    assert (error.status, error.code) == (401, "unauthorized")
    assert error.message == "invalid or revoked API key"
    assert str(error) == "invalid or revoked API key (unauthorized, HTTP 401)"
    client = client_of(prompts.api, http)
    with pytest.raises(ApiError) as missing:
        client.get_prompt("nope")
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    assert missing.value.message == "prompt 'nope' not found"
    with pytest.raises(ApiError) as other:  # another tenant's prompt is not found either
        client_of(prompts.api, http, key=prompts.api.other).get_prompt(prompts.classification)
    assert other.value.status == 404
    assert [s[3] for s in seen] == [401, 404, 404]


def test_an_error_after_a_cached_read_is_raised_not_served_from_the_cache(
    prompts: Prompts, wire
) -> None:
    """A key revoked after the prompt was kept: the revalidation's 401 is raised."""
    api = prompts.api
    created = api.client.post(
        "/v1/keys", json={"scope": "prompts:read"}, headers=auth(api.admin)
    ).json()
    http, _ = wire
    client = client_of(api, http, key=created["key"])
    client.get_prompt(prompts.classification)
    assert (
        api.client.delete(f"/v1/keys/{created['id']}", headers=auth(api.admin)).status_code == 200
    )
    with pytest.raises(ApiError) as raised:
        client.get_prompt(prompts.classification)
    assert raised.value.status == 401


def test_the_cache_keeps_the_most_recently_used_prompts(prompts: Prompts, wire) -> None:
    http, seen = wire
    client = client_of(prompts.api, http, cache_size=1)
    client.get_prompt(prompts.classification)
    client.get_prompt(prompts.extraction)  # drops the classification prompt
    client.get_prompt(prompts.classification)
    client.get_prompt(prompts.classification)
    assert [(s[2] is not None, s[3]) for s in seen] == [
        (False, 200),
        (False, 200),
        (False, 200),
        (True, 304),
    ]


def test_a_body_that_is_not_the_apis_error_still_raises_with_its_status() -> None:
    """A proxy's HTML page: the status and reason phrase, no code."""
    page = httpx.MockTransport(lambda request: httpx.Response(502, text="<html>bad gateway</html>"))
    with httpx.Client(transport=page) as http:
        client = PromptClient("http://proxy", "key", http=http)
        with pytest.raises(ApiError) as raised:
            client.get_prompt("p1")
    assert (raised.value.status, raised.value.code) == (502, None)
    assert raised.value.message == "HTTP 502 Bad Gateway"


def test_an_unreachable_server_raises_with_httpx_error_as_cause() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with PromptClient(url, "key", timeout=5) as client, pytest.raises(UnreachableError) as raised:
        client.get_prompt("p1")
    assert str(raised.value).startswith(f"cannot reach the dpsyn server at {url}")
    assert isinstance(raised.value.__cause__, httpx.ConnectError)


def test_an_unreachable_server_s_url_credentials_are_never_printed() -> None:
    """Issue 42: ``UnreachableError`` printed a ``user:password@`` URL whole."""
    port = free_port()
    url = f"http://app-user:s3cret-pw@127.0.0.1:{port}/"
    with PromptClient(url, "key", timeout=5) as client, pytest.raises(UnreachableError) as raised:
        client.get_prompt("p1")
    assert "s3cret-pw" not in str(raised.value) and "app-user" not in str(raised.value)
    assert "s3cret-pw" not in raised.value.url
    assert f"***@127.0.0.1:{port}" in str(raised.value)


def test_the_client_loads_neither_the_web_app_nor_the_database() -> None:
    code = (
        "import sys, dpsyn_client\n"
        "layers = ('app.db', 'app.api', 'app.services', 'app.synthesis', 'workers', "
        "'sqlalchemy', 'fastapi', 'starlette', 'torch', 'numpy')\n"
        "print(sorted(m for m in sys.modules if m.startswith(layers)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"
