"""Engine time shared between keys and tenants (app.api.engine_gate).

The gate alone first (a fake clock, no app), then through the app: an answer held in the
engine (the fake backend waits on an event) fills its key's share, and the key's next answer
is refused 429 with Retry-After while another tenant's is answered; a key past its prompt
tokens a minute is refused until it has paid them back.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from app.api.engine_gate import ENGINE_BUSY, PROMPT_TOKENS_RATE, EngineGate, EngineLimits, Slot
from app.db.migrate import upgrade
from app.llm.factory import BackendKind
from app.services.errors import TooManyError
from app.settings import Settings
from tests.api.conftest import auth, error_of, make_api
from tests.api.test_prompt_messages import Prompts, make_prompts

QUESTION = {"role": "user", "content": "Question: where is the river ?"}
TEXT = {"type": "text"}


def limits(**values: Any) -> EngineLimits:
    base = {"per_key": 0, "per_tenant": 0, "engine": 0, "wait_s": 0.2}
    return EngineLimits(**{**base, "prompt_tokens_per_minute": 0, **values})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_defaults_are_the_engines_and_settings_override_them() -> None:
    embedded = EngineLimits.of(Settings(database_url="sqlite://"))
    assert (embedded.per_key, embedded.per_tenant, embedded.engine) == (2, 3, 4)
    assert embedded.prompt_tokens_per_minute == 20_000
    vllm = EngineLimits.of(Settings(database_url="sqlite://", backend=BackendKind.VLLM))
    assert vllm.engine == 0 and vllm.prompt_tokens_per_minute == 0 and vllm.per_key == 32
    mine = EngineLimits.of(Settings(database_url="sqlite://", generations_per_key=0))
    assert mine.per_key == 0 and mine.per_tenant == 3


def test_a_waiter_of_a_full_key_never_holds_back_another_keys() -> None:
    async def scenario() -> list[str]:
        gate, order = EngineGate(limits(per_key=1, engine=2, wait_s=5)), []
        a = gate.hold("a", "t1")
        first = await a.__aenter__()
        await gate.enter(first)

        async def answer(key: str, tenant: str) -> None:
            async with gate.hold(key, tenant) as slot:
                await gate.enter(slot)
                order.append(key)
                await asyncio.sleep(0.01)

        waiting = asyncio.create_task(answer("a", "t1"))  # a's share is full: it waits
        await asyncio.sleep(0.01)
        await answer("b", "t2")  # b fits the engine: it is not queued behind a's waiter
        assert order == ["b"] and gate.waiters
        await a.__aexit__(None, None, None)  # a's first answer ends: its waiter starts
        await waiting
        assert gate.running == 0 and not gate.by_key and not gate.by_tenant
        return order

    assert asyncio.run(scenario()) == ["b", "a"]


def test_an_answer_that_cannot_start_within_its_wait_is_refused_naming_the_bound() -> None:
    async def scenario(**bounds: int) -> TooManyError:
        gate = EngineGate(limits(wait_s=0.05, **bounds))
        async with gate.hold("k", "t") as held:
            await gate.enter(held)
            with pytest.raises(TooManyError) as refused:
                await gate.enter(Slot(gate, "k", "t"))
            assert not gate.waiters and gate.running == 1
        return refused.value

    for bound, setting in [
        ({"per_key": 1}, "DPSYN_GENERATIONS_PER_KEY"),
        ({"per_tenant": 1}, "DPSYN_GENERATIONS_PER_TENANT"),
        ({"engine": 1}, "DPSYN_ENGINE_GENERATIONS"),
    ]:
        error = asyncio.run(scenario(**bound))
        assert error.error_code == ENGINE_BUSY and error.extra["retry_after_s"] == 1
        assert setting in error.message and "DPSYN_GENERATION_WAIT_S" in error.message


def test_a_key_past_its_prompt_tokens_waits_until_it_has_paid_them_back() -> None:
    clock = Clock()
    gate = EngineGate(limits(prompt_tokens_per_minute=600), clock=clock)  # 10 a second

    async def answer(key: str, tokens: int) -> None:
        async with gate.hold(key, "t") as slot:
            await gate.enter(slot)
            slot.prompt_tokens = tokens

    asyncio.run(answer("k", 500))
    asyncio.run(answer("k", 400))  # 100 left: admitted, and now owes 300
    with pytest.raises(TooManyError) as refused:
        asyncio.run(answer("k", 1))
    assert refused.value.error_code == PROMPT_TOKENS_RATE
    assert refused.value.extra["retry_after_s"] == 30  # 300 owed at 10 a second
    asyncio.run(answer("other", 1))  # another key's allowance is its own
    clock.now += 30
    asyncio.run(answer("k", 1))
    clock.now += 120
    asyncio.run(answer("k", 0))
    assert "k" not in gate.balances  # a full allowance again: the key is forgotten


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prompts]:
    url = f"sqlite:///{tmp_path_factory.mktemp('engine') / 'dpsyn.db'}"
    upgrade(url)
    for api in make_api(url):
        yield make_prompts(api)


class Held:
    """The fake backend's calls wait for ``release`` while ``hold`` is set."""

    def __init__(self, backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        real = backend.top_k

        def top_k(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            self.release.wait(timeout=30)
            return real(*args, **kwargs)

        monkeypatch.setattr(backend, "top_k", top_k)


def _chat(prompts: Prompts, key: str, model: str | None = None):
    body = {"model": model or prompts.classification, "messages": [QUESTION], "max_tokens": 2}
    body["response_format"] = TEXT
    return prompts.api.client.post("/v1/chat/completions", json=body, headers=auth(key))


def test_a_keys_answers_past_its_share_get_429_and_another_tenant_is_answered(
    prompts: Prompts, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = prompts.api
    api.client.app.state.engine_gate = EngineGate(limits(per_key=1, per_tenant=1, wait_s=0.3))
    held = Held(api.backend, monkeypatch)
    first: list[Any] = []
    thread = threading.Thread(target=lambda: first.append(_chat(prompts, api.reader)))
    thread.start()
    assert held.entered.wait(timeout=30)  # the first answer is in the engine
    refused = _chat(prompts, api.reader)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    error = error_of(refused)
    assert error["code"] == ENGINE_BUSY and "DPSYN_GENERATIONS_PER_KEY" in error["message"]
    # another key of the same tenant meets the tenant's bound
    same_tenant = _chat(prompts, api.admin)
    assert same_tenant.status_code == 429
    assert "DPSYN_GENERATIONS_PER_TENANT" in error_of(same_tenant)["message"]
    # a request that is invalid is told so, without waiting for the engine
    invalid = api.client.post("/v1/chat/completions", json={"model": 1}, headers=auth(api.reader))
    assert invalid.status_code == 400
    held.release.set()
    thread.join()
    assert first[0].status_code == 200, first[0].text
    assert _chat(prompts, api.reader).status_code == 200  # the slot was given back
    assert api.client.app.state.engine_gate.running == 0


def test_a_key_past_its_prompt_tokens_a_minute_gets_429_until_paid_back(prompts: Prompts) -> None:
    api = prompts.api
    gate = EngineGate(limits(prompt_tokens_per_minute=20))
    api.client.app.state.engine_gate = gate
    answered = _chat(prompts, api.reader)
    assert answered.status_code == 200
    read = answered.json()["usage"]["prompt_tokens"]
    assert read > 20  # the DP prompt and the question: past the minute's 20
    refused = _chat(prompts, api.reader)
    assert refused.status_code == 429
    error = error_of(refused)
    assert (
        error["code"] == PROMPT_TOKENS_RATE and "DPSYN_PROMPT_TOKENS_PER_MINUTE" in error["message"]
    )
    owed_s = (read - 20) * 3  # paid back at 20 a minute: 3 s a token
    assert int(refused.headers["Retry-After"]) in range(owed_s - 2, owed_s + 1)
    # another tenant's prompt is not found, before any wait or charge
    assert _chat(prompts, api.other).status_code == 404
    # a streamed answer is charged too, once its stream has been sent
    gate.balances.clear()
    body = {"model": prompts.classification, "messages": [QUESTION], "stream": True}
    with api.client.stream(
        "POST", "/v1/chat/completions", json=body, headers=auth(api.reader)
    ) as streamed:
        assert streamed.status_code == 200
        assert "[DONE]" in "".join(streamed.iter_text())
    [(left, _)] = gate.balances.values()
    assert left < 0 and gate.running == 0
