"""What a prompt serves is clean text, on the packaged Gemma model's real outputs (issue 55.7):
a Tang job on support tickets whose records are HTML (as a web-trained base model writes its
own texts: ``<b>``, ``</h3>``) ran through the worker, and its prompt's demonstrations, its
text, its chat messages (``?format=messages``) and the messages the OpenAI-compatible route
sends the engine held tags and the display ellipsis ``…`` of the demonstrations T_max cut.

The model really writes markup here, and T_max really cuts: the test records what the
generator got from the model before cleaning (``demonstration_text``'s input) and checks
both, so that it cannot pass on outputs that were clean to begin with."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app.llm.provider import StaticProvider
from app.synthesis import generator
from app.synthesis.markup import ELLIPSIS, HTML_TAG
from tests.api.conftest import Api, auth, make_api

TASK: dict[str, Any] = {
    "name": "tickets",
    "kind": "classification",
    "instruction": "Given a queue, write the HTML of a support ticket for that queue.",
    "icl_instruction": "Route the support tickets to their queues.",
    "text_field": "Ticket",
    "label_field": "Queue",
    "labels": ["billing", "outage"],
}
# Small enough for two CPU cores (about 5 s of CPU for the job); T_max 5 cuts a demonstration
# that does not stop first. In 8 seeded runs of this shape at epsilon 50 the model wrote a tag
# in every run and T_max cut a demonstration in every run.
PARAMS = {"M": 2, "N": 1, "tmax": 5, "K": 20, "min_words": 1}
SHOTS = 3
#: Anything tag-like: a known element's tag or any "<word ...>" (wider than the cleaner).
TAG_LIKE = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>")


def _rows() -> list[dict[str, str]]:
    run = uuid.uuid4().hex[:6]  # records of their own (an upload again would be refused)
    return [
        row
        for i in range(16)
        for row in (
            {"text": f"<b>Invoice {run}-{i}</b> charged twice, please refund", "label": "billing"},
            {"text": f"<h3>Server {run}-{i} down</h3> since this morning", "label": "outage"},
        )
    ]  # fmt: skip


def _clean(text: str) -> None:
    assert not TAG_LIKE.search(text), text
    assert ELLIPSIS not in text, text


#: Jobs the fixture may run for one whose outputs hold the premises: its noisy argmax can
#: write only markup for every demonstration (" <strong>", " <b>": all cleaned away).
ATTEMPTS = 4


@pytest.fixture(scope="module")
def served(gemma, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, str, list]]:
    """A Tang job run by the real worker on Gemma: the API, the prompt's ID, and what the
    model wrote for each demonstration before cleaning (text, whether it stopped itself).
    The first of up to ``ATTEMPTS`` jobs in which the model wrote a tag, T_max cut a
    demonstration and one demonstration kept some text once cleaned (the last job if none:
    the premise test then says which premise failed)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('clean-demos') / 'dpsyn.db'}"
    written: list[tuple[str, bool]] = []
    original = generator.demonstration_text

    def recording(text: str, finished: bool) -> str:
        written.append((text, finished))
        return original(text, finished)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generator, "demonstration_text", recording)
        for api in make_api(url, provider=StaticProvider(gemma)):
            for _ in range(ATTEMPTS):
                written.clear()
                prompt_id = _run_job(api, gemma)
                if _premises_hold(api, prompt_id, written):
                    break
            yield api, prompt_id, list(written)


def _run_job(api: Api, gemma: Any) -> str:
    """A Tang job on fresh HTML tickets, run by the worker: its prompt's ID."""
    dataset = api.upload(_rows(), task=TASK)
    assert api.budget(dataset["id"], 100.0).status_code == 200
    job = api.submit(dataset["id"], epsilon=50.0, shots=SHOTS, params=PARAMS).json()
    api.run_worker(job["id"], gemma)
    done = api.client.get(f"/v1/jobs/{job['id']}", headers=auth(api.admin)).json()
    assert done["status"] == "succeeded", done
    return done["prompt_id"]


def _premises_hold(api: Api, prompt_id: str, written: list[tuple[str, bool]]) -> bool:
    prompt = api.client.get(f"/v1/prompts/{prompt_id}", headers=auth(api.reader)).json()
    tagged = any(HTML_TAG.search(text) for text, _ in written)
    cut = any(not finished for _, finished in written)
    return tagged and cut and bool(prompt["demonstrations"])


def test_the_model_wrote_markup_and_was_cut(served) -> None:
    """The premise: Gemma's raw demonstrations hold tags, and T_max cut some of them."""
    _, _, written = served
    assert len(written) == SHOTS
    assert any(HTML_TAG.search(text) for text, _ in written), written
    assert any(not finished for _, finished in written), written


def test_stored_demonstrations_and_the_prompt_text_are_clean(served) -> None:
    api, prompt_id, _ = served
    prompt = api.client.get(f"/v1/prompts/{prompt_id}", headers=auth(api.reader)).json()
    assert prompt["demonstrations"], prompt  # the fixture's premise: one kept some text
    for demo in prompt["demonstrations"]:
        _clean(demo["text"])
        assert demo["text"] == " ".join(demo["text"].split()) != ""
    _clean(prompt["prompt"])


def test_chat_messages_and_what_the_openai_route_sends_are_clean(served, monkeypatch) -> None:
    api, prompt_id, _ = served
    messages = api.client.get(
        f"/v1/prompts/{prompt_id}?format=messages", headers=auth(api.reader)
    ).json()["messages"]
    assert len(messages) > 1
    for message in messages:
        _clean(message["content"])

    from app.services import openai_compat

    sent: list[Any] = []
    original = openai_compat._local_chat_text

    def recording(model: Any, conversation: Any) -> Any:
        sent.append(list(conversation))
        return original(model, conversation)

    monkeypatch.setattr(openai_compat, "_local_chat_text", recording)
    reply = api.client.post(
        "/v1/chat/completions",
        json={
            "model": prompt_id,
            "messages": [{"role": "user", "content": "Ticket: my card was charged twice"}],
            "max_tokens": 1,
            "response_format": {"type": "text"},
        },
        headers=auth(api.reader),
    )
    assert reply.status_code == 200, reply.text
    [conversation] = sent
    assert conversation[: len(messages)] == messages  # the prompt's messages, then the app's
    for message in conversation:
        _clean(message["content"])
