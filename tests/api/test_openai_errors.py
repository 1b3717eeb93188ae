"""OpenAI's error conventions on the OpenAI-compatible routes, read with the official
``openai`` package: an invalid request is a 400 ``invalid_request_error`` naming the field in
``param`` (``BadRequestError``), an unknown prompt a 404 (``NotFoundError``), every status the
routes answer is declared in the OpenAPI document (checked by schemathesis), a base URL
without ``/v1`` gets a 404 that says so; the service's own routes keep their 422.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from app.api.openai_errors import openai_param
from app.db.migrate import upgrade
from app.llm.base import BackendError
from tests.api.conftest import Api, auth, error_of, make_api
from tests.api.test_prompt_messages import Prompts, make_prompts

QUESTION = [{"role": "user", "content": "Question: where is the river ?"}]
OPENAI_OPERATIONS = [
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model_id}"),
]
MAX_BODY_BYTES = 8192


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prompts]:
    url = f"sqlite:///{tmp_path_factory.mktemp('openai-errors') / 'dpsyn.db'}"
    upgrade(url)
    limits = {"openai_max_tokens": 12, "openai_max_input_chars": 200}
    for api in make_api(url, max_body_bytes=MAX_BODY_BYTES, **limits):
        yield make_prompts(api)


def sdk(api: Api, base_url: str = "http://testserver/v1") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=base_url, api_key=api.reader, http_client=api.client, max_retries=0
    )


def usage_of(api: Api) -> dict[str, int]:
    keys = api.client.get("/v1/keys", headers=auth(api.admin)).json()
    (key,) = [k for k in keys if k["scope"] == "prompts:read"]
    return {name: key[name] for name in key if name.startswith("usage_")}


CHAT_REFUSALS = [
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "invalid"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", "invalid"),
    ({"messages": [{"role": "user"}]}, "messages[0].content", "invalid"),  # missing
    (
        {"messages": [*QUESTION, {"role": "user", "content": "x" * 201}]},
        "messages",
        "input_too_long",
    ),
    ({"temperature": 3}, "temperature", "invalid"),
    ({"max_tokens": 13}, "max_tokens", "max_tokens_too_large"),
    ({"max_completion_tokens": 0}, "max_completion_tokens", "invalid"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "invalid"),
]
COMPLETION_REFUSALS = [
    ({"max_tokens": 0}, "max_tokens", "invalid"),
    ({"temperature": 2.5}, "temperature", "invalid"),
    ({"top_p": 0}, "top_p", "invalid"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid"),
    ({"stop": [""]}, "stop", "invalid"),  # the schema says so too (minLength 1)
    ({"stop": 5}, "stop", "invalid"),  # a union (str | list[str]): its members not named
    ({"prompt": "x" * 201}, "prompt", "input_too_long"),
]


def _refused(call: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as raised:
        call()
    error = raised.value
    assert error.status_code == 400 and error.type == "invalid_request_error"
    return error


@pytest.mark.parametrize(("fields", "param", "code"), CHAT_REFUSALS)
def test_an_invalid_chat_request_is_a_bad_request_naming_the_field(
    prompts: Prompts, fields: dict[str, Any], param: str, code: str
) -> None:
    api = prompts.api
    before = usage_of(api)
    body = {"model": prompts.classification, "messages": QUESTION, "max_tokens": 4, **fields}
    error = _refused(lambda: sdk(api).chat.completions.create(**body))
    assert error.param == param and error.code == code
    message = error.body["message"]  # type: ignore[index]
    assert message.startswith(f"{param}: ")  # the message names it as param does
    assert "x" * 20 not in message  # the app's text is never echoed
    assert usage_of(api) == before  # a refusal asks nothing of the engine


@pytest.mark.parametrize(("fields", "param", "code"), COMPLETION_REFUSALS)
def test_an_invalid_completion_request_is_a_bad_request_naming_the_field(
    prompts: Prompts, fields: dict[str, Any], param: str, code: str
) -> None:
    api = prompts.api
    body = {"model": prompts.classification, "prompt": "Question: who ?", **fields}
    error = _refused(lambda: sdk(api).completions.create(**body))
    assert error.param == param and error.code == code


def test_a_body_that_is_not_json_is_a_bad_request_naming_no_field(prompts: Prompts) -> None:
    api = prompts.api
    headers = {**auth(api.reader), "Content-Type": "application/json"}
    for content in (b"{", b"[" * 3000 + b"]" * 3000):  # under the 8,192-byte limit
        response = api.client.post("/v1/chat/completions", content=content, headers=headers)
        assert response.status_code == 400, response.text
        error = error_of(response)
        assert error["type"] == "invalid_request_error" and error["param"] is None


def test_an_unknown_prompt_is_a_not_found_error_on_both_routes(prompts: Prompts) -> None:
    client = sdk(prompts.api)
    calls = [
        lambda: client.chat.completions.create(model="0" * 32, messages=QUESTION),
        lambda: client.completions.create(model="0" * 32, prompt="Question: who ?"),
        lambda: client.models.retrieve("0" * 32),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as raised:
            call()
        assert raised.value.type == "not_found_error" and raised.value.code == "not_found"


def test_a_base_url_without_v1_is_told_to_add_it(prompts: Prompts) -> None:
    client = sdk(prompts.api, base_url="http://testserver")
    calls = [
        lambda: client.chat.completions.create(model=prompts.classification, messages=QUESTION),
        lambda: client.completions.create(model=prompts.classification, prompt="Question: ?"),
        lambda: client.models.list(),
        lambda: client.models.retrieve(prompts.classification),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as raised:
            call()
        assert raised.value.code == "base_url_without_v1"
        assert "add /v1 to the client's base URL" in raised.value.message


def test_other_unknown_paths_keep_the_plain_404(prompts: Prompts) -> None:
    api = prompts.api
    for path in ("/nothing-here", "/v1/nothing-here", "/v2/chat/completions", "/v1/v1/models"):
        response = api.client.post(path, json={}, headers=auth(api.reader))
        assert response.status_code == 404, path
        assert error_of(response)["code"] == "not_found", path


def test_the_service_routes_keep_their_422(prompts: Prompts) -> None:
    api = prompts.api
    reader, admin = auth(api.reader), auth(api.admin)
    complete = f"/v1/prompts/{prompts.classification}/complete"
    response = api.client.post(complete, json={"query": 5}, headers=reader)
    assert response.status_code == 422 and error_of(response)["code"] == "invalid"
    assert api.client.get("/v1/jobs", params={"limit": 0}, headers=admin).status_code == 422
    # the check made before routing tells the two apart by path
    assert api.client.get("/v1/prompts?q=%00", headers=reader).status_code == 422
    nul = api.client.get("/v1/models?q=%00", headers=reader)
    assert nul.status_code == 400 and error_of(nul)["param"] == "q"


def _validated(api: Api, method: str, path: str, key: str | None, **case: Any) -> int:
    """The call's status, after schemathesis checked it against the OpenAPI document: a
    declared status, a body of the declared schema (a declared 502 too)."""
    import schemathesis
    from schemathesis.checks import not_a_server_error

    schema = schemathesis.openapi.from_asgi("/openapi.json", api.client.app)
    headers = {**(auth(key) if key else {}), "Content-Type": "application/json"}
    made = schema[path][method].Case(headers=headers, media_type="application/json", **case)
    response = made.call_and_validate(excluded_checks=[not_a_server_error])
    return response.status_code


def test_every_status_the_routes_answer_is_declared(
    prompts: Prompts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Provoke each error of the OpenAI-compatible routes through schemathesis's checks, then
    walk the document: what was provoked is what is declared, less the three not provoked
    here but declared, as on every keyed route (403: an org key; 429 and 503: limits and
    outages), and no route declares the 422 it never answers."""
    api, chat, text = prompts.api, "/v1/chat/completions", "/v1/completions"
    model, question = prompts.classification, {"messages": QUESTION, "max_tokens": 2}
    seen: dict[tuple[str, str], set[int]] = {op: set() for op in OPENAI_OPERATIONS}

    def call(method: str, path: str, key: str | None = api.reader, **case: Any) -> None:
        seen[(method, path)].add(_validated(api, method, path, key, **case))

    for path, body in ((chat, question), (text, {"prompt": "Question: who ?", "max_tokens": 2})):
        call("POST", path, body={"model": model, **body})  # 200
        call("POST", path, None, body={"model": model, **body})  # 401
        call("POST", path, body={**body, "model": "0" * 32})  # 404
        call("POST", path, body={"model": model, **body, "temperature": 9})  # 400
        call("POST", path, body={"model": prompts.soft, **body})  # 409: no embeddings here
        call("POST", path, body={"model": model, **body, "user": "u" * MAX_BODY_BYTES})  # 413
    for path, params in (("/v1/models", {}), ("/v1/models/{model_id}", {"model_id": model})):
        call("GET", path, path_parameters=params)  # 200
        call("GET", path, None, path_parameters=params)  # 401
        call("GET", path, path_parameters=params, query={"q": "\x00"})  # 400
    call("GET", "/v1/models/{model_id}", path_parameters={"model_id": "0" * 32})  # 404

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise BackendError("vLLM server x /v1/completions: HTTP 400: too long", status=400)

    monkeypatch.setattr(api.backend, "tokenize", refuse)
    call("POST", chat, body={"model": prompts.extraction, **question})  # 502
    call("POST", text, body={"model": prompts.extraction, "prompt": "a", "max_tokens": 2})
    monkeypatch.undo()

    document = api.client.get("/openapi.json").json()
    for (method, path), statuses in seen.items():
        declared = {int(s) for s in document["paths"][path][method.lower()]["responses"]}
        assert {403, 429, 503} <= declared, (method, path, declared)
        assert statuses == declared - {403, 429, 503}, (method, path, statuses, declared)
        assert 422 not in declared
    # the service's own routes still declare theirs
    complete = document["paths"]["/v1/prompts/{prompt_id}/complete"]["post"]["responses"]
    assert "422" in complete


@pytest.mark.parametrize(
    ("error", "body", "param"),
    [
        (
            {"loc": ("body", "messages", 0, "content")},
            {"messages": [{"content": 5}]},
            "messages[0].content",
        ),
        # a union's member is named in the location, not in the request
        ({"loc": ("body", "stop", "list[str]")}, {"stop": 5}, "stop"),
        (
            {"loc": ("body", "m", 0, "content", "list[Part]", 0)},
            {"m": [{"content": {}}]},
            "m[0].content",
        ),
        # a missing field is named; a name that is not there is only one when missing
        ({"loc": ("body", "prompt"), "type": "missing"}, {"model": "p"}, "prompt"),
        ({"loc": ("body", "stop", "str"), "type": "string_type"}, {"stop": {}}, "stop"),
        ({"loc": ("body", 1), "type": "json_invalid"}, "{", None),  # not JSON: no field
        ({"loc": ("body",), "type": "missing"}, None, None),
        ({"loc": ("query", "limit")}, None, "limit"),
    ],
)
def test_param_is_the_field_as_openai_writes_it(error: dict, body: Any, param: str | None) -> None:
    assert openai_param(error, body) == param
