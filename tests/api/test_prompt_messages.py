"""``GET /v1/prompts/{id}?format=messages``: a prompt as chat messages (issue 34).

One app and database for the module, with three prompts run by the real worker on the fake
backend: a classification prompt, an extraction prompt (mitg) and a soft prompt. The
messages must be :func:`dpsyn_client.chat.chat_messages` of the prompt's JSON (the rendering the
downstream client does), revalidate with their own ETag, and be refused for a soft prompt.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from dpsyn_client.chat import chat_messages

from app.db.migrate import upgrade
from tests.api.conftest import MARKER, TOY_TASK, Api, auth, error_of, make_api
from tests.api.test_soft_prompts import run_with_soft_prompt, soft_prompt


@dataclass
class Prompts:
    api: Api
    classification: str
    extraction: str
    soft: str


def make_prompts(api: Api) -> Prompts:
    """The three prompts of the module, through uploads, budgets, jobs and the worker."""
    dataset = api.upload()
    assert api.budget(dataset["id"], 5.0).status_code == 200
    plain, soft = (api.submit(dataset["id"]).json()["id"] for _ in range(2))
    api.run_job(plain)
    run_with_soft_prompt(api, soft, soft_prompt())
    rows = [{"text": f"{MARKER} a film {i}", "label": f"{MARKER}-genre"} for i in range(12)]
    films = api.upload(rows, task="mitg")
    assert api.budget(films["id"], 3.0).status_code == 200
    extraction = api.submit(films["id"]).json()["id"]
    api.run_job(extraction, marker="Sentence:")
    done = {
        j["id"]: j["prompt_id"] for j in api.client.get("/v1/jobs", headers=auth(api.admin)).json()
    }
    return Prompts(api, done[plain], done[extraction], done[soft])


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prompts]:
    url = f"sqlite:///{tmp_path_factory.mktemp('messages') / 'dpsyn.db'}"
    upgrade(url)
    for api in make_api(url):
        yield make_prompts(api)


def _get(api: Api, prompt_id: str, query: str = "", **headers: str):
    return api.client.get(
        f"/v1/prompts/{prompt_id}{query}", headers={**auth(api.reader), **headers}
    )


@pytest.mark.parametrize("kind", ["classification", "extraction"])
def test_messages_are_the_shared_rendering_of_the_prompt(prompts: Prompts, kind: str) -> None:
    api, prompt_id = prompts.api, getattr(prompts, kind)
    prompt = _get(api, prompt_id).json()
    response = _get(api, prompt_id, "?format=messages")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body == {"prompt_id": prompt_id, "messages": chat_messages(prompt)}
    messages = body["messages"]
    demos = prompt["demonstrations"]
    assert demos and len(messages) == 1 + 2 * len(demos)
    assert messages[0] == {"role": "system", "content": prompt["task_spec"]["icl_instruction"]}
    assert [m["role"] for m in messages[1:]] == ["user", "assistant"] * len(demos)
    text_field = prompt["task_spec"]["text_field"]
    for demo, user, assistant in zip(demos, messages[1::2], messages[2::2], strict=True):
        assert user["content"] == f"{text_field}: {demo['text']}"
        assert assistant["content"] == demo["label"]  # the toy's and mitg's words are the labels
    if kind == "classification":
        assert messages[0]["content"] == TOY_TASK["icl_instruction"]
        # both labels, unless the noise made a demonstration only a label's name (the toy's
        # labels are words of the fake model): it is then left out, and said in the notes
        answers = {m["content"] for m in messages[2::2]}
        assert answers == {"w5", "w7"} or (answers < {"w5", "w7"} and prompt["notes"])


def test_format_text_and_no_format_are_the_same_body(prompts: Prompts) -> None:
    plain = _get(prompts.api, prompts.classification)
    text = _get(prompts.api, prompts.classification, "?format=text")
    assert plain.status_code == text.status_code == 200
    assert text.content == plain.content and text.headers["etag"] == plain.headers["etag"]
    assert "demonstrations" in plain.json() and "messages" not in plain.json()


def test_messages_have_their_own_etag_and_revalidate_with_304(prompts: Prompts) -> None:
    api, prompt_id = prompts.api, prompts.classification
    text_etag = _get(api, prompt_id).headers["etag"]
    first = _get(api, prompt_id, "?format=messages")
    etag = first.headers["etag"]
    assert etag.startswith('"') and etag != text_etag
    again = _get(api, prompt_id, "?format=messages", **{"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    # The text body's tag is not the messages' tag: the body is sent.
    other = _get(api, prompt_id, "?format=messages", **{"If-None-Match": text_etag})
    assert other.status_code == 200 and other.content == first.content


def test_an_unknown_format_is_422_naming_the_allowed_values(prompts: Prompts) -> None:
    response = _get(prompts.api, prompts.classification, "?format=chatml")
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "invalid"
    assert error["fields"][0]["field"] == "format (query)"
    assert "'text'" in error["message"] and "'messages'" in error["message"]
    assert "chatml" not in error["message"]  # a parameter's value is not echoed


def test_a_soft_prompt_has_no_messages_form(prompts: Prompts) -> None:
    response = _get(prompts.api, prompts.soft, "?format=messages")
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "no_chat_form" and "soft prompt" in error["message"]
    assert _get(prompts.api, prompts.soft).status_code == 200  # its JSON is still readable


def test_another_tenants_prompt_is_404_in_either_format(prompts: Prompts) -> None:
    api = prompts.api
    assert _get(api, prompts.classification, "?format=messages").status_code == 200  # cached
    for query in ("?format=messages", ""):
        path = f"/v1/prompts/{prompts.classification}{query}"
        other = api.client.get(path, headers={**auth(api.other), "If-None-Match": "*"})
        assert other.status_code == 404 and error_of(other)["code"] == "not_found"


def test_the_openapi_document_declares_the_format_and_both_bodies(prompts: Prompts) -> None:
    document = prompts.api.client.get("/openapi.json").json()
    route = document["paths"]["/v1/prompts/{prompt_id}"]["get"]
    [param] = [p for p in route["parameters"] if p["name"] == "format"]
    assert param["in"] == "query" and not param.get("required")
    schema = document["components"]["schemas"]["PromptFormat"]
    assert schema["enum"] == ["text", "messages"]
    body = route["responses"]["200"]["content"]["application/json"]["schema"]
    refs = {item["$ref"].rsplit("/", 1)[-1] for item in body["anyOf"]}
    assert refs == {"PromptPublic", "PromptMessagesPublic"}
    assert {"304", "409", "422"} <= set(route["responses"])
