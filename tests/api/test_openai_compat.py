"""The OpenAI-compatible endpoint (issue 44): ``GET /v1/models``, ``POST /v1/chat/completions``
and ``POST /v1/completions`` with a prompt ID as ``model``, on the embedded engine.

One app and database for the module, with the prompts of ``test_prompt_messages`` (a
classification prompt, an extraction prompt and a soft prompt) made by the real worker on the
fake backend, which also answers here: its greedy answer is a function of the context's
length, so an answer's token counts show what the engine was given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest
from dpsyn_client.chat import chat_messages

from app.db.migrate import upgrade
from app.llm.generation import transcript
from tests.api.conftest import Api, auth, error_of, make_api
from tests.api.test_prompt_messages import Prompts, make_prompts

QUESTION = {"role": "user", "content": "Question: where is the river ?"}
TEXT = {"type": "text"}  # free text (a classification prompt answers a label by default)


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prompts]:
    url = f"sqlite:///{tmp_path_factory.mktemp('openai') / 'dpsyn.db'}"
    upgrade(url)
    for api in make_api(url, openai_max_tokens=12, openai_max_input_chars=200):
        yield make_prompts(api)


def chat(api: Api, key: str | None = None, **body):
    body = {"messages": [QUESTION], "max_tokens": 4, **body}
    return api.client.post("/v1/chat/completions", json=body, headers=auth(key or api.reader))


def usage_of(api: Api, key_scope: str = "prompts:read") -> dict[str, int]:
    keys = api.client.get("/v1/keys", headers=auth(api.admin)).json()
    (key,) = [k for k in keys if k["scope"] == key_scope]
    return {name: key[name] for name in key if name.startswith("usage_")}


def events(text: str) -> list[dict | str]:
    out: list[dict | str] = []
    for block in text.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_models_are_the_prompts_the_key_may_read(prompts: Prompts) -> None:
    api = prompts.api
    listed = api.client.get("/v1/models", headers=auth(api.reader)).json()
    assert listed["object"] == "list"
    ids = {model["id"] for model in listed["data"]}
    assert ids == {prompts.classification, prompts.extraction, prompts.soft}
    assert all(m["object"] == "model" and m["owned_by"] == "dpsyn" for m in listed["data"])
    one = api.client.get(f"/v1/models/{prompts.classification}", headers=auth(api.reader))
    assert one.json()["id"] == prompts.classification
    # another tenant sees none of them, and cannot read one by its ID
    assert api.client.get("/v1/models", headers=auth(api.other)).json()["data"] == []
    response = chat(api, api.other, model=prompts.classification)
    assert response.status_code == 404 and error_of(response)["type"] == "not_found_error"


def test_a_chat_answer_follows_the_prompts_messages(prompts: Prompts) -> None:
    api = prompts.api
    response = chat(api, model=prompts.classification, response_format=TEXT)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == prompts.classification
    assert body["id"].startswith("chatcmpl-")
    [choice] = body["choices"]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] == "length"
    prompt = api.client.get(f"/v1/prompts/{prompts.classification}", headers=auth(api.reader))
    conversation = [*chat_messages(prompt.json()), QUESTION]
    # the engine read the prompt's demonstrations, then the app's message, as a transcript
    # (the fake model has no chat template)
    expected = len(api.backend.tokenize(transcript(conversation)))
    assert body["usage"]["prompt_tokens"] == expected
    assert body["usage"]["completion_tokens"] == 4
    assert body["usage"]["total_tokens"] == expected + 4


def test_a_text_completion_continues_the_prompts_text(prompts: Prompts) -> None:
    api = prompts.api
    prompt = api.client.get(f"/v1/prompts/{prompts.classification}", headers=auth(api.reader))
    text = "Question: where is the river ?\nType:"
    response = api.client.post(
        "/v1/completions",
        json={
            "model": prompts.classification,
            "prompt": text,
            "max_tokens": 3,
            "response_format": TEXT,
        },
        headers=auth(api.reader),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "text_completion" and body["choices"][0]["text"]
    expected = len(api.backend.tokenize(prompt.json()["prompt"] + text))
    assert body["usage"]["prompt_tokens"] == expected


def test_a_stream_sends_the_same_answer_in_pieces(prompts: Prompts) -> None:
    api = prompts.api
    whole = chat(api, model=prompts.classification, response_format=TEXT).json()
    response = chat(
        api,
        model=prompts.classification,
        response_format=TEXT,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    sent = events(response.text)
    assert sent[-1] == "[DONE]"
    chunks = [e for e in sent[:-1] if isinstance(e, dict)]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    pieces = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert "".join(p for p in pieces if p) == whole["choices"][0]["message"]["content"]
    assert len([p for p in pieces if p]) > 1  # in pieces, not at once
    finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finish[-1] == "length" and set(finish[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]


def test_a_stop_string_ends_the_answer_and_is_left_out(prompts: Prompts) -> None:
    api = prompts.api
    free = chat(api, model=prompts.classification, response_format=TEXT).json()
    words = free["choices"][0]["message"]["content"].split(" ")
    assert len(words) >= 2
    cut = chat(api, model=prompts.classification, response_format=TEXT, stop=[" " + words[1]])
    cut = cut.json()
    assert cut["choices"][0]["message"]["content"] == words[0]
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_each_answer_is_counted_for_its_key(prompts: Prompts) -> None:
    api = prompts.api
    before = usage_of(api)
    body = chat(api, model=prompts.classification, max_tokens=2, response_format=TEXT).json()
    streamed = chat(
        api, model=prompts.classification, max_tokens=3, stream=True, response_format=TEXT
    )
    assert streamed.status_code == 200
    after = usage_of(api)
    assert after["usage_requests"] == before["usage_requests"] + 2
    assert after["usage_completion_tokens"] == before["usage_completion_tokens"] + 5
    prompt_tokens = body["usage"]["prompt_tokens"]
    assert after["usage_prompt_tokens"] == before["usage_prompt_tokens"] + 2 * prompt_tokens
    assert usage_of(api, "admin")["usage_requests"] == 0  # the other key's is its own
    # a reader cannot see the counts (admins only)
    assert api.client.get("/v1/keys", headers=auth(api.reader)).status_code == 403


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        ({"max_tokens": 13}, 400, "max_tokens_too_large", "max_tokens"),
        ({"max_completion_tokens": 100}, 400, "max_tokens_too_large", "max_completion_tokens"),
        ({"messages": [{"role": "user", "content": "x" * 201}]}, 400, "input_too_long", "messages"),
        ({"n": 2}, 400, "invalid", "n"),
        ({"tools": []}, 400, "invalid", "tools"),
        ({"model": "0" * 32}, 404, "not_found", None),
    ],
)
def test_refusals_name_the_limit_in_openais_shape(
    prompts: Prompts, body: dict, status: int, code: str, param: str | None
) -> None:
    api = prompts.api
    before = usage_of(api)
    response = chat(api, **{"model": prompts.classification, **body})
    assert response.status_code == status, response.text
    error = error_of(response)
    assert error["code"] == code and error["param"] == param
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    assert "x" * 20 not in error["message"]  # the app's text is never echoed
    assert usage_of(api) == before  # a refusal asks nothing of the engine


def test_a_soft_prompt_on_an_engine_without_embeddings_is_a_409(prompts: Prompts) -> None:
    api = prompts.api
    response = chat(api, model=prompts.soft)
    assert response.status_code == 409, response.text
    assert error_of(response)["code"] == "backend_unsupported"


def test_a_revoked_key_is_refused(prompts: Prompts) -> None:
    api = prompts.api
    created = api.client.post(
        "/v1/keys", json={"scope": "prompts:read"}, headers=auth(api.admin)
    ).json()
    assert chat(api, created["key"], model=prompts.classification).status_code == 200
    api.client.delete(f"/v1/keys/{created['id']}", headers=auth(api.admin))
    response = chat(api, created["key"], model=prompts.classification)
    assert response.status_code == 401
    assert error_of(response)["type"] == "authentication_error"


# --- answers in the prompt's vocabulary (issue 53) ----------------------------------------------
# The real model's decisions are tested in tests/api/test_openai_labels.py; these check the
# forms, shapes and refusals on the fake backend.


def label_of(api: Api, prompt_id: str, query: str, calibrated: bool = False) -> dict:
    response = api.client.post(
        f"/v1/prompts/{prompt_id}/complete",
        json={"query": query, "calibrated": calibrated},
        headers=auth(api.reader),
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_a_classification_prompt_answers_its_label_by_default(prompts: Prompts) -> None:
    api = prompts.api
    expected = label_of(api, prompts.classification, "where is the river ?")
    body = chat(api, model=prompts.classification, max_tokens=1).json()
    [choice] = body["choices"]
    # the whole label, though max_tokens is 1 and the reply is one piece
    assert choice["message"]["content"] == expected["label"] and choice["finish_reason"] == "stop"
    assert choice["logprobs"] is None
    prompt = api.client.get(f"/v1/prompts/{prompts.classification}", headers=auth(api.reader))
    scored = prompt.json()["prompt"] + "Question: where is the river ?\nType:"
    assert body["usage"]["prompt_tokens"] == len(api.backend.tokenize(scored))  # /complete's
    assert body["usage"]["completion_tokens"] == 1
    text = api.client.post(
        "/v1/completions",
        json={"model": prompts.classification, "prompt": "where is the river ?"},
        headers=auth(api.reader),
    ).json()
    assert text["choices"][0]["text"] == " " + expected["label"]  # the answer line, continued
    assert text["usage"] == body["usage"]


def test_label_logprobs_in_each_routes_shape(prompts: Prompts) -> None:
    api = prompts.api
    scores = label_of(api, prompts.classification, "where is the river ?")["scores"]
    body = chat(api, model=prompts.classification, logprobs=True, top_logprobs=1).json()
    [token] = body["choices"][0]["logprobs"]["content"]
    best = max(scores, key=scores.__getitem__)
    assert token["token"] == best and token["bytes"] == list(best.encode())
    assert token["logprob"] == pytest.approx(math.log(scores[best]))
    assert [t["token"] for t in token["top_logprobs"]] == [best]  # top_logprobs 1
    streamed = chat(api, model=prompts.classification, logprobs=True, stream=True)
    chunks = [e for e in events(streamed.text) if isinstance(e, dict)]
    pieces = [c["choices"][0] for c in chunks if c["choices"][0]["delta"].get("content")]
    assert len(pieces) == 1 and pieces[0]["logprobs"]["content"][0]["token"] == best
    assert pieces[0]["logprobs"]["content"][0]["top_logprobs"] == []  # top_logprobs 0
    text = api.client.post(
        "/v1/completions",
        json={"model": prompts.classification, "prompt": "where is the river ?", "logprobs": 2},
        headers=auth(api.reader),
    ).json()["choices"][0]["logprobs"]
    assert text["tokens"] == [" " + best] and text["text_offset"] == [0]
    assert text["top_logprobs"] == [
        {" " + label: pytest.approx(math.log(p)) for label, p in scores.items()}
    ]


def test_free_text_logprobs_follow_the_tokens(prompts: Prompts) -> None:
    api = prompts.api
    body = chat(
        api, model=prompts.classification, response_format=TEXT, logprobs=True, top_logprobs=2
    ).json()
    choice = body["choices"][0]
    tokens = choice["logprobs"]["content"]
    assert len(tokens) == body["usage"]["completion_tokens"] == 4
    assert " ".join(t["token"] for t in tokens) == choice["message"]["content"]
    assert all(len(t["top_logprobs"]) == 2 for t in tokens)
    assert all(t["logprob"] <= 0 for t in tokens)
    streamed = chat(
        api, model=prompts.classification, response_format=TEXT, logprobs=True, stream=True
    )
    chunks = [e for e in events(streamed.text) if isinstance(e, dict) and e["choices"]]
    sent = [t["token"] for c in chunks if c["choices"][0]["logprobs"]
            for t in c["choices"][0]["logprobs"]["content"]]  # fmt: skip
    assert sent == [t["token"] for t in tokens]  # each piece carries its own tokens


def test_an_extraction_prompt_answers_free_text(prompts: Prompts) -> None:
    api = prompts.api
    body = chat(api, model=prompts.extraction, max_tokens=3).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3


def test_guided_choice_is_one_of_the_choices_on_the_embedded_engine(prompts: Prompts) -> None:
    api = prompts.api
    choices = ["w3 w9", "w0", "nothing"]
    body = chat(
        api, model=prompts.classification, guided_choice=choices, logprobs=True, top_logprobs=3
    ).json()
    content = body["choices"][0]["message"]["content"]
    assert content in choices
    [token] = body["choices"][0]["logprobs"]["content"]
    assert {t["token"] for t in token["top_logprobs"]} == set(choices)
    assert sum(math.exp(t["logprob"]) for t in token["top_logprobs"]) == pytest.approx(1.0)
    schema = {"type": "object", "properties": {"kind": {"enum": ["w5", "w7"]}},
              "required": ["kind"], "additionalProperties": False}  # fmt: skip
    response_format = {"type": "json_schema", "json_schema": {"name": "k", "schema": schema}}
    answer = chat(api, model=prompts.classification, response_format=response_format).json()
    assert json.loads(answer["choices"][0]["message"]["content"]) in (
        {"kind": "w5"},
        {"kind": "w7"},
    )
    same = chat(api, model=prompts.classification, structured_outputs={"choice": choices}).json()
    assert same["choices"][0]["message"]["content"] == content


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        ({"calibrated": True, "response_format": TEXT}, "calibration_not_applicable", "calibrated"),
        (
            {"guided_choice": ["a"], "response_format": {"type": "json_object"}},
            "conflicting_constraints",
            "response_format",
        ),
        ({"response_format": {"type": "json_object"}}, "unsupported_constraint", "response_format"),
        (
            {"structured_outputs": {"regex": "w[0-9]"}},
            "unsupported_constraint",
            "structured_outputs",
        ),
        ({"guided_choice": ["a", "a"]}, "invalid_choices", "guided_choice"),
        ({"guided_choice": ["x" * 201]}, "invalid_choices", "guided_choice"),
        ({"top_logprobs": 2}, "logprobs_not_asked", "top_logprobs"),
        (
            {"messages": [QUESTION, {"role": "assistant", "content": "w5"}]},
            "no_question",
            "messages",
        ),
        ({"messages": [{"role": "user", "content": "Question:  "}]}, "empty_question", "messages"),
    ],
)
def test_forms_it_cannot_answer_are_refused_by_name(
    prompts: Prompts, body: dict, code: str, param: str
) -> None:
    api = prompts.api
    before = requests_counted(api)
    response = chat(api, **{"model": prompts.classification, **body})
    assert response.status_code in (400, 422), response.text
    error = error_of(response)
    assert (error["code"], error["param"]) == (code, param)
    assert error["message"].startswith(param)
    assert requests_counted(api) == before  # a refusal asks nothing of the engine


def requests_counted(api: Api) -> int:
    keys = api.client.get("/v1/keys", headers=auth(api.admin)).json()
    return sum(key["usage_requests"] for key in keys)


def test_calibrated_applies_to_classification_prompts_only(prompts: Prompts) -> None:
    response = chat(prompts.api, model=prompts.extraction, calibrated=True)
    assert response.status_code in (400, 422)
    assert error_of(response)["param"] == "calibrated"
