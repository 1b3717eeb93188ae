"""A classification prompt answers with its labels on the OpenAI-compatible routes, on the real
packaged model (Gemma-3-270M, embedded engine), read with the official ``openai`` package.

docs/client.md's ten-line app asked ``/v1/chat/completions`` after a TREC prompt and took the
model's free text: 9 of 30 test questions right, 15 answers no label at all (``distance``,
``1950``), where ``/complete`` (label scoring) got 17. Here a TREC prompt of real training
questions (the first of each label) answers TREC test questions (the first of some labels):
the documented app's answer must be a label word and the one ``/complete`` gives, on both
routes, calibrated too; the label distribution comes back as log-probabilities equal to
``/complete``'s scores; free text is the model's own greedy continuation; ``guided_choice``
and a JSON schema's choices are the model's own choice, checked against a direct forward pass.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import openai
import pytest
import torch
from pydantic import BaseModel
from sqlalchemy import select

from app.db.migrate import upgrade
from app.db.models import Dataset, Job, PromptSet, Tenant
from app.db.session import session_scope
from app.eval.datasets import load_split
from app.llm.generation import GenerationParams, local_generate, transcript
from app.llm.provider import StaticProvider
from app.synthesis.data import Record
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.tasks import BUILTIN_TASKS
from tests.api.conftest import Api, auth, error_of, make_api
from tests.conftest import require_shared_data

TREC = BUILTIN_TASKS["trec"]
WORDS = [TREC.verbalise(label) for label in TREC.labels]


@dataclass
class Served:
    api: Api
    prompt_id: str
    prompt: dict  # GET /v1/prompts/{id}
    questions: list[Record]


def first_of_each_label(records: list[Record]) -> list[Record]:
    firsts: dict[str, Record] = {}
    for record in records:
        firsts.setdefault(record.label, record)
    return [firsts[label] for label in TREC.labels]


def store_prompt(url: str, demos: list[Record]) -> str:
    """A TREC prompt set of ``demos`` for tenant A (the only ``tenant-a-*`` of the module's
    database), stored as the worker stores one."""
    with session_scope(url) as session:
        tenant = session.scalars(select(Tenant).where(Tenant.name.like("tenant-a-%"))).one()
        counts = {label: 1 for label in TREC.labels}
        task = TREC.model_dump(mode="json")
        dataset = Dataset(
            tenant_id=tenant.id, name="trec", task=task, label_counts=counts, record_count=6
        )
        session.add(dataset)
        session.flush()
        job = Job(tenant_id=tenant.id, dataset_id=dataset.id, method="adadpsyn", config={},
                  schedule=[], event={}, epsilon=8.0, delta=1e-6, status="succeeded")  # fmt: skip
        session.add(job)
        session.flush()
        row = PromptSet(
            tenant_id=tenant.id, job_id=job.id, dataset_id=dataset.id,
            task=task,
            demonstrations=[{"label": d.label, "text": d.text} for d in demos],
            prompt=demonstration_prompt(TREC, demos), method="adadpsyn", model="gemma-3-270m",
            epsilon=8.0, delta=1e-6,
        )  # fmt: skip
        session.add(row)
        session.flush()
        return row.id


@pytest.fixture(scope="module")
def served(gemma, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = require_shared_data("trec/train.txt", "trec/test.txt")
    train, test = load_split("trec", root)
    url = f"sqlite:///{tmp_path_factory.mktemp('openai-labels') / 'dpsyn.db'}"
    upgrade(url)
    for api in make_api(url, provider=StaticProvider(gemma)):
        prompt_id = store_prompt(url, first_of_each_label(train))
        prompt = api.client.get(f"/v1/prompts/{prompt_id}", headers=auth(api.reader)).json()
        yield Served(api, prompt_id, prompt, first_of_each_label(test))


def sdk(api: Api) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://testserver/v1", api_key=api.reader, http_client=api.client, max_retries=0
    )


def complete(served: Served, query: str, calibrated: bool = False) -> dict:
    response = served.api.client.post(
        f"/v1/prompts/{served.prompt_id}/complete",
        json={"query": query, "calibrated": calibrated},
        headers=auth(served.api.reader),
    )
    assert response.status_code == 200, response.text
    return response.json()


def answer_type(client: openai.OpenAI, prompt_id: str, question: str) -> str:
    """docs/client.md's app, as written there."""
    messages = [{"role": "user", "content": f"Question: {question}"}]
    reply = client.chat.completions.create(model=prompt_id, messages=messages, max_tokens=8)
    return reply.choices[0].message.content.strip()  # e.g. "location"


def test_the_documented_app_answers_the_label_complete_gives(served: Served) -> None:
    client = sdk(served.api)
    for record in served.questions[1::2]:  # three labels' questions: a few seconds each
        expected = TREC.verbalise(complete(served, record.text)["label"])
        assert answer_type(client, served.prompt_id, record.text) == expected
        text = client.completions.create(
            model=served.prompt_id, prompt=f"Question: {record.text}\nAnswer Type:", max_tokens=4
        )
        assert text.choices[0].text == " " + expected  # the prompt's answer line, continued
        assert text.choices[0].finish_reason == "stop"


def test_a_calibrated_label_is_completes_calibrated_label(served: Served) -> None:
    question = served.questions[2].text
    calibrated = complete(served, question, calibrated=True)
    plain = complete(served, question)["scores"]
    reply = sdk(served.api).chat.completions.create(
        model=served.prompt_id,
        messages=[{"role": "user", "content": f"Question: {question}"}],
        logprobs=True,
        top_logprobs=6,
        extra_body={"calibrated": True},
    )
    assert reply.choices[0].message.content == TREC.verbalise(calibrated["label"])
    [token] = reply.choices[0].logprobs.content
    shown = {e.token: math.exp(e.logprob) for e in token.top_logprobs}
    words = {TREC.verbalise(label): p for label, p in calibrated["scores"].items()}
    assert shown == pytest.approx(words, abs=1e-6)  # the calibrated distribution
    assert shown != pytest.approx({TREC.verbalise(k): p for k, p in plain.items()}, abs=1e-3)


def test_log_probabilities_are_the_label_distribution(served: Served) -> None:
    client = sdk(served.api)
    question = served.questions[4].text
    scores = complete(served, question)["scores"]
    expected = {TREC.verbalise(label): math.log(p) for label, p in scores.items()}
    reply = client.chat.completions.create(
        model=served.prompt_id,
        messages=[{"role": "user", "content": f"Question: {question}"}],
        logprobs=True,
        top_logprobs=20,
    )
    [token] = reply.choices[0].logprobs.content
    assert token.token == reply.choices[0].message.content
    assert token.logprob == pytest.approx(expected[token.token], abs=1e-6)
    top = {entry.token: entry.logprob for entry in token.top_logprobs}
    assert top == pytest.approx(expected, abs=1e-6)  # every label, as /complete scores it
    values = [entry.logprob for entry in token.top_logprobs]
    assert values == sorted(values, reverse=True)
    assert sum(math.exp(v) for v in values) == pytest.approx(1.0)
    text = client.completions.create(
        model=served.prompt_id, prompt=f"Question: {question}", logprobs=2
    )
    logprobs = text.choices[0].logprobs
    assert logprobs.tokens == [text.choices[0].text] and logprobs.text_offset == [0]
    best = sorted(expected.items(), key=lambda kv: -kv[1])[:2]
    assert logprobs.top_logprobs[0] == pytest.approx({" " + w: v for w, v in best}, abs=1e-6)


def test_a_streamed_label_is_one_chunk_with_its_log_probabilities(served: Served) -> None:
    client = sdk(served.api)
    messages = [{"role": "user", "content": f"Question: {served.questions[0].text}"}]
    whole = client.chat.completions.create(model=served.prompt_id, messages=messages)
    chunks = list(
        client.chat.completions.create(
            model=served.prompt_id, messages=messages, stream=True, logprobs=True, top_logprobs=3
        )
    )
    texts = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert texts == [whole.choices[0].message.content]
    [carrying] = [c for c in chunks if c.choices[0].logprobs is not None]
    assert len(carrying.choices[0].logprobs.content[0].top_logprobs) == 3
    assert chunks[-1].choices[0].finish_reason == "stop"


def conversation(served: Served, question: str) -> str:
    """The text the embedded engine reads for a chat request (the model has no chat
    template: the transcript of the prompt's messages and the app's)."""
    messages = served.api.client.get(
        f"/v1/prompts/{served.prompt_id}?format=messages", headers=auth(served.api.reader)
    ).json()["messages"]
    return transcript([*messages, {"role": "user", "content": f"Question: {question}"}])


def test_free_text_when_the_app_asks_for_it(served: Served, gemma) -> None:
    question = served.questions[1].text
    reply = sdk(served.api).chat.completions.create(
        model=served.prompt_id,
        messages=[{"role": "user", "content": f"Question: {question}"}],
        max_tokens=5,
        response_format={"type": "text"},
    )
    params = GenerationParams(max_tokens=5, stop=("\nUser:", "\nSystem:"))
    *pieces, _ = local_generate(gemma, conversation(served, question), params)
    assert reply.choices[0].message.content == "".join(pieces)  # the model's own words


@torch.inference_mode()
def next_token_distribution(gemma, text: str, candidates: list[int]) -> list[float]:
    """Direct forward pass: the next token's probabilities among ``candidates``."""
    ids = [gemma.tokenizer.bos_token_id, *gemma.tokenize(text)]
    logits = gemma.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    chosen = torch.softmax(logits, dim=-1)[candidates]
    return (chosen / chosen.sum()).tolist()


def test_guided_choice_is_the_models_choice_after_the_conversation(served: Served, gemma) -> None:
    question = served.questions[3].text
    choices = ["yes", "no", "maybe"]
    tokens = [gemma.tokenize(" " + c) for c in choices]
    assert all(len(t) == 1 for t in tokens)  # one token each: one forward pass decides
    expected = next_token_distribution(
        gemma, conversation(served, question), [t[0] for t in tokens]
    )
    reply = sdk(served.api).chat.completions.create(
        model=served.prompt_id,
        messages=[{"role": "user", "content": f"Question: {question}"}],
        logprobs=True,
        top_logprobs=3,
        extra_body={"guided_choice": choices},
    )
    best = max(range(3), key=expected.__getitem__)
    assert reply.choices[0].message.content == choices[best]
    top = {e.token: math.exp(e.logprob) for e in reply.choices[0].logprobs.content[0].top_logprobs}
    assert top == pytest.approx(dict(zip(choices, expected, strict=True)), abs=1e-4)


class AnswerType(BaseModel):
    answer_type: Literal["abbreviation", "entity", "description", "person", "location", "number"]


def test_a_json_schema_of_fixed_strings_answers_one_of_them(served: Served) -> None:
    client = sdk(served.api)
    messages = [{"role": "user", "content": f"Question: {served.questions[4].text}"}]
    parsed = client.chat.completions.parse(
        model=served.prompt_id, messages=messages, response_format=AnswerType
    )
    assert parsed.choices[0].message.parsed.answer_type in WORDS
    enum = {"type": "json_schema", "json_schema": {"name": "t", "schema": {"enum": WORDS}}}
    reply = client.chat.completions.create(
        model=served.prompt_id, messages=messages, response_format=enum
    )
    assert json.loads(reply.choices[0].message.content) in WORDS


def test_a_schema_the_embedded_engine_cannot_write_is_refused_by_name(served: Served) -> None:
    schema = {"type": "object", "properties": {"year": {"type": "integer"}}}
    response = served.api.client.post(
        "/v1/chat/completions",
        json={
            "model": served.prompt_id,
            "messages": [{"role": "user", "content": "Question: When was Rome founded ?"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "y", "schema": schema},
            },
        },
        headers=auth(served.api.reader),
    )
    assert response.status_code in (400, 422), response.text
    error = error_of(response)
    assert error["param"] == "response_format" and error["code"] == "unsupported_constraint"
    assert "vLLM" in error["message"]
