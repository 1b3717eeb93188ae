"""The embedded engine's text answers (app.llm.generation) on the real packaged model: greedy
decoding inside one KV scope must write exactly the tokens of the model's own greedy
continuation (direct forward passes, no cache), stop strings end the answer, and sampling is
repeatable under a seed."""

from __future__ import annotations

import pytest
import torch

from app.llm.generation import (
    SAMPLE_TOP_K,
    Finished,
    GenerationParams,
    Logprobs,
    local_generate,
    transcript,
)

PROMPT = (
    "Question: What is the capital of France?\nAnswer: Paris\n"
    "Question: What is the capital of Italy?\nAnswer:"
)


@pytest.fixture(scope="module")
def backend(gemma):
    return gemma


def run(backend, prompt: str, **params) -> tuple[str, Finished, list[str]]:
    pieces = list(local_generate(backend, prompt, GenerationParams(**params)))
    *texts, finished = pieces
    assert isinstance(finished, Finished)
    return "".join(texts), finished, texts


@torch.inference_mode()
def direct_greedy(backend, prompt: str, steps: int) -> list[int]:
    ids = [backend.tokenizer.bos_token_id, *backend.tokenize(prompt)]
    out = []
    for _ in range(steps):
        token = int(backend.model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
        out.append(token)
        ids.append(token)
    return out


def test_greedy_answers_are_the_models_own_continuation(backend) -> None:
    text, finished, texts = run(backend, PROMPT, max_tokens=6)
    expected = direct_greedy(backend, PROMPT, 6)
    assert backend.eos_id not in expected
    assert text == backend.detokenize(expected)
    assert finished == Finished("length", len(backend.tokenize(PROMPT)), 6)
    assert len(texts) > 1  # streamed in pieces
    assert "Rome" in text


def test_a_stop_string_ends_the_answer(backend) -> None:
    text, finished, _ = run(backend, PROMPT, max_tokens=12, stop=("\n",))
    assert "\n" not in text and text.strip() == "Rome"
    assert finished.reason == "stop" and finished.completion_tokens < 12


def test_a_transcript_answer_stops_at_the_next_turn(backend) -> None:
    messages = [
        {"role": "system", "content": "Answer with the capital city."},
        {"role": "user", "content": "France"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "Italy"},
    ]
    text, finished, _ = run(
        backend, transcript(messages), max_tokens=16, stop=("\nUser:", "\nSystem:")
    )
    assert "User:" not in text and "Rome" in text
    assert finished.reason == "stop" and finished.completion_tokens < 16


def test_sampling_is_repeatable_under_a_seed_and_varies_without(backend) -> None:
    params = {"max_tokens": 4, "temperature": 1.5, "seed": 7}
    first, _, _ = run(backend, "Once upon a time", **params)
    again, _, _ = run(backend, "Once upon a time", **params)
    assert first == again
    others = {run(backend, "Once upon a time", **{**params, "seed": s})[0] for s in range(3)}
    assert len(others) > 1


def test_log_probabilities_are_the_models_among_the_candidates(backend) -> None:
    """Asked for, they change no token; each is the token's probability among the
    SAMPLE_TOP_K most probable text tokens (what a token is drawn from), checked on the first
    token against a direct forward pass."""
    plain, _, _ = run(backend, PROMPT, max_tokens=3)
    items = list(local_generate(backend, PROMPT, GenerationParams(max_tokens=3, logprobs=2)))
    entries = [t for item in items if isinstance(item, Logprobs) for t in item.tokens]
    assert "".join(item for item in items if isinstance(item, str)) == plain
    assert len(entries) == 3 and "".join(e.token for e in entries) == plain
    top = backend.top_k([backend.tokenize(PROMPT)], SAMPLE_TOP_K)[0]
    with torch.inference_mode():
        ids = [backend.tokenizer.bos_token_id, *backend.tokenize(PROMPT)]
        logits = backend.model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    probs = torch.softmax(logits, dim=-1)[torch.tensor(top)]
    expected = (probs / probs.sum()).log().tolist()
    assert entries[0].logprob == pytest.approx(expected[0], abs=1e-4)
    assert [word for word, _ in entries[0].top] == [backend.detokenize([t]) for t in top[:2]]
    assert [value for _, value in entries[0].top] == pytest.approx(expected[:2], abs=1e-4)
