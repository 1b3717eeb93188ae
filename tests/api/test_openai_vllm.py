"""The OpenAI-compatible endpoint on a server whose engine is a real vLLM (the CPU build,
scripts/vllm_serve.sh, the packaged Gemma-3-270M), read with the official openai package.

The packaged model is a base model without a chat template: vLLM refuses its chat endpoint,
and the service then sends the conversation as a transcript to vLLM's completions endpoint
(app.llm.vllm_generate), which stops at the next turn.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

import openai
import pytest

from app.db.migrate import upgrade
from app.llm.embedding_table import EmbeddingTable
from app.llm.factory import BackendKind
from app.llm.provider import BackendProvider
from app.llm.transformers_backend import model_folder
from app.llm.vllm_http import VLLMHttpBackend
from app.promptdpsgd.artifact import SoftPrompt
from tests.api.conftest import Api, auth, make_api
from tests.api.test_prompt_messages import Prompts, make_prompts

QUESTION = [{"role": "user", "content": "Question: What city is the capital of France ?"}]
TEXT = {"type": "text"}  # free text (a classification prompt answers a label by default)


@dataclass
class Served:
    prompts: Prompts
    soft: str  # a soft prompt for the served model: its own embeddings of a few-shot prompt


@pytest.fixture(scope="module")
def served(vllm_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url = f"sqlite:///{tmp_path_factory.mktemp('openai-vllm') / 'dpsyn.db'}"
    upgrade(url)
    provider = BackendProvider(BackendKind.VLLM, model=vllm_server.served_name, url=vllm_server.url)
    soft = served_soft_prompt(vllm_server)
    for api in make_api(url, provider=provider):
        prompts = make_prompts(api)  # the jobs run on the fake backend; vLLM answers below
        dataset = api.upload()
        assert api.budget(dataset["id"], 5.0).status_code == 200
        job = api.submit(dataset["id"]).json()["id"]
        api.run_job(job, edit=lambda result: replace(result, model=soft.model, soft_prompt=soft))
        jobs = {j["id"]: j for j in api.client.get("/v1/jobs", headers=auth(api.admin)).json()}
        yield Served(prompts, jobs[job]["prompt_id"])


def served_soft_prompt(vllm_server) -> SoftPrompt:
    """The served model's own input embeddings of a TREC-like few-shot prompt."""
    text = "Question: Where is Rome ?\nType: w5\nQuestion: Who is he ?\nType: w7\n"
    with VLLMHttpBackend(url=vllm_server.url, model=vllm_server.served_name) as remote:
        ids = remote.tokenize(text)
    table = EmbeddingTable(model_folder(vllm_server.served_name))
    return SoftPrompt(vllm_server.served_name, table.embed(ids))


@pytest.fixture(scope="module")
def prompts(served: Served) -> Prompts:
    return served.prompts


def sdk(api: Api, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(
        base_url="http://testserver/v1",
        api_key=key or api.reader,
        http_client=api.client,
        max_retries=0,
    )


def test_the_openai_package_reads_a_prompt_answered_by_vllm(prompts: Prompts) -> None:
    client = sdk(prompts.api)
    answer = client.chat.completions.create(
        model=prompts.classification, messages=QUESTION, max_tokens=8, response_format=TEXT
    )
    text = answer.choices[0].message.content
    assert text and "User:" not in text  # the transcript's next turn is not part of it
    assert answer.model == prompts.classification
    assert answer.usage is not None and answer.usage.prompt_tokens > 20
    assert 1 <= answer.usage.completion_tokens <= 8
    streamed = client.chat.completions.create(
        model=prompts.classification,
        messages=QUESTION,
        max_tokens=8,
        response_format=TEXT,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(streamed)
    pieces = [chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices]
    streamed_text = "".join(pieces)
    # Not compared with `text`: vLLM's greedy answer is not bit-reproducible between two
    # requests (the second reads the first's prefix cache, and the batch it shares differs),
    # and on a near-tie CI once got " France" whole and " Paris" streamed. That a stream
    # spells out the whole answer exactly is tested on a deterministic backend
    # (tests/api/test_openai_compat.py); here the stream carries the same prompt, the answer
    # within its bound, and ends before the transcript's next turn.
    assert streamed_text.strip() and "User:" not in streamed_text
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens == answer.usage.prompt_tokens
    assert 1 <= usage.completion_tokens <= 8


def test_a_text_completion_through_vllm(prompts: Prompts) -> None:
    api = prompts.api
    completion = sdk(api).completions.create(
        model=prompts.classification,
        prompt="Question: Who wrote Hamlet ?\nType:",
        max_tokens=3,
        extra_body={"response_format": TEXT},
    )
    assert completion.choices[0].text
    assert completion.usage is not None and completion.usage.completion_tokens <= 3
    keys = api.client.get("/v1/keys", headers=auth(api.admin)).json()
    (reader,) = [k for k in keys if k["scope"] == "prompts:read"]
    assert reader["usage_requests"] >= 1 and reader["usage_completion_tokens"] >= 1


def test_a_soft_prompt_answers_through_vllm_prompt_embeddings(served: Served) -> None:
    api = served.prompts.api
    answer = sdk(api).chat.completions.create(
        model=served.soft, messages=QUESTION, max_tokens=4, response_format=TEXT
    )
    assert answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.prompt_tokens > 0
    complete = api.client.post(
        f"/v1/prompts/{served.soft}/complete",
        json={"query": "Where is Paris ?"},
        headers=auth(api.reader),
    )
    assert complete.status_code == 200, complete.text
    assert complete.json()["label"] in ("w5", "w7")
    assert sum(complete.json()["scores"].values()) == pytest.approx(1.0)
    label = sdk(api).chat.completions.create(
        model=served.soft, messages=[{"role": "user", "content": "Question: Where is Paris ?"}]
    )
    assert label.choices[0].message.content == complete.json()["label"]  # the same scorer


def test_a_soft_prompt_of_another_model_is_a_409(prompts: Prompts) -> None:
    with pytest.raises(openai.ConflictError) as raised:
        sdk(prompts.api).chat.completions.create(
            model=prompts.soft, messages=QUESTION, max_tokens=2
        )
    assert raised.value.code == "model_mismatch"


def test_an_unknown_prompt_is_openais_404(prompts: Prompts) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        sdk(prompts.api).chat.completions.create(model="0" * 32, messages=QUESTION)
    assert raised.value.body["type"] == "not_found_error"  # type: ignore[index]


# --- answers in the prompt's vocabulary (issue 53) ----------------------------------------------


def test_a_label_answer_through_vllm_is_completes_decision(prompts: Prompts) -> None:
    api = prompts.api
    complete = api.client.post(
        f"/v1/prompts/{prompts.classification}/complete",
        json={"query": "What city is the capital of France ?"},
        headers=auth(api.reader),
    ).json()
    answer = sdk(api).chat.completions.create(
        model=prompts.classification, messages=QUESTION, logprobs=True, top_logprobs=2
    )
    assert answer.choices[0].message.content == complete["label"]  # the toy's words: labels
    [token] = answer.choices[0].logprobs.content
    shown = {t.token: math.exp(t.logprob) for t in token.top_logprobs}
    # vLLM's scores of two requests differ in the last digits (batching): close, not equal
    assert shown == pytest.approx(complete["scores"], abs=1e-3)


def test_guided_choice_and_schemas_pass_to_vllm(prompts: Prompts) -> None:
    client = sdk(prompts.api)
    choices = ["alpha", "beta"]  # words the prompt never answers: only the constraint writes them
    guided = client.chat.completions.create(
        model=prompts.classification, messages=QUESTION, extra_body={"guided_choice": choices}
    )
    assert guided.choices[0].message.content in choices
    enum = {"type": "json_schema", "json_schema": {"name": "c", "schema": {"enum": choices}}}
    written = client.chat.completions.create(
        model=prompts.classification, messages=QUESTION, max_tokens=32, response_format=enum
    )
    assert json.loads(written.choices[0].message.content) in choices
    # a constraint the embedded engine refuses (not a fixed set): vLLM writes it
    regex = client.chat.completions.create(
        model=prompts.classification, messages=QUESTION, max_tokens=8,
        extra_body={"structured_outputs": {"regex": "[0-9]{4}"}},
    )  # fmt: skip
    assert re.fullmatch("[0-9]{4}", regex.choices[0].message.content)
    text = client.completions.create(
        model=prompts.classification, prompt="Question: Who wrote Hamlet ?\nType:",
        extra_body={"guided_choice": choices},
    )  # fmt: skip
    assert text.choices[0].text in choices


def test_free_text_log_probabilities_come_from_vllm(prompts: Prompts) -> None:
    answer = sdk(prompts.api).chat.completions.create(
        model=prompts.classification,
        messages=QUESTION,
        max_tokens=4,
        response_format={"type": "text"},
        logprobs=True,
        top_logprobs=2,
    )
    tokens = answer.choices[0].logprobs.content
    assert tokens and "".join(t.token for t in tokens) == answer.choices[0].message.content
    assert all(len(t.top_logprobs) >= 2 and t.logprob <= 0 for t in tokens)
