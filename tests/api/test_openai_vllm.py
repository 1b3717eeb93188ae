"""The OpenAI-compatible endpoint on a server whose engine is a real vLLM (the CPU build,
scripts/vllm_serve.sh, the packaged Gemma-3-270M), read with the official openai package.

The packaged model is a base model without a chat template: vLLM refuses its chat endpoint,
and the service then sends the conversation as a transcript to vLLM's completions endpoint
(app.llm.vllm_generate), which stops at the next turn.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from app.db.migrate import upgrade
from app.llm.factory import BackendKind
from app.llm.provider import BackendProvider
from tests.api.conftest import Api, auth, make_api
from tests.api.test_prompt_messages import Prompts, make_prompts

QUESTION = [{"role": "user", "content": "Question: What city is the capital of France ?"}]


@pytest.fixture(scope="module")
def prompts(vllm_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prompts]:
    url = f"sqlite:///{tmp_path_factory.mktemp('openai-vllm') / 'dpsyn.db'}"
    upgrade(url)
    provider = BackendProvider(BackendKind.VLLM, model=vllm_server.served_name, url=vllm_server.url)
    for api in make_api(url, provider=provider):
        yield make_prompts(api)  # the jobs run on the fake backend; vLLM answers below


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
        model=prompts.classification, messages=QUESTION, max_tokens=8
    )
    text = answer.choices[0].message.content
    assert text and "User:" not in text  # the transcript's next turn is not part of it
    assert answer.model == prompts.classification
    assert answer.usage is not None and answer.usage.prompt_tokens > 20
    assert 1 <= answer.usage.completion_tokens <= 8
    streamed = client.chat.completions.create(
        model=prompts.classification, messages=QUESTION, max_tokens=8, stream=True
    )
    pieces = [chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices]
    assert "".join(pieces) == text  # greedy on both


def test_a_text_completion_through_vllm(prompts: Prompts) -> None:
    api = prompts.api
    completion = sdk(api).completions.create(
        model=prompts.classification, prompt="Question: Who wrote Hamlet ?\nType:", max_tokens=3
    )
    assert completion.choices[0].text
    assert completion.usage is not None and completion.usage.completion_tokens <= 3
    keys = api.client.get("/v1/keys", headers=auth(api.admin)).json()
    (reader,) = [k for k in keys if k["scope"] == "prompts:read"]
    assert reader["usage_requests"] >= 1 and reader["usage_completion_tokens"] >= 1


def test_a_soft_prompt_is_a_409_on_vllm(prompts: Prompts) -> None:
    with pytest.raises(openai.ConflictError) as raised:
        sdk(prompts.api).chat.completions.create(
            model=prompts.soft, messages=QUESTION, max_tokens=2
        )
    assert raised.value.code == "backend_unsupported"


def test_an_unknown_prompt_is_openais_404(prompts: Prompts) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        sdk(prompts.api).chat.completions.create(model="0" * 32, messages=QUESTION)
    assert raised.value.body["type"] == "not_found_error"  # type: ignore[index]
