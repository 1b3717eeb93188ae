"""Soft prompts served by a real vLLM (the CPU build, scripts/vllm_serve.sh, which starts it
with --enable-prompt-embeds): the same soft prompt scores SST-2 through vLLM's prompt
embeddings as through the local model's forward pass (issue 44).

The soft prompt is a few-shot SST-2 prompt's own input embeddings, perturbed so that it is
no sequence of tokens: what vLLM must reproduce is the embeddings, not the text. vLLM runs
in bfloat16 on CPUs that compute it natively and the local model in float32, hence the
tolerances.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.eval.datasets import default_data_dir, load_split
from app.llm.vllm_http import VLLMHttpBackend
from app.promptdpsgd.artifact import SoftPrompt
from app.promptdpsgd.backend import SoftPromptedBackend, SoftPromptMismatch
from app.promptdpsgd.vllm import NoEmbeddingTableError, vllm_soft_prompted
from app.synthesis.prompts import demonstration_prompt
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import BUILTIN_TASKS
from tests.conftest import require_shared_data

DEMOS = [
    ("a gorgeous, witty, seductive movie.", "positive"),
    ("the plot is a dull, tedious mess.", "negative"),
    ("one of the most moving films of the year.", "positive"),
    ("a waste of two good actors.", "negative"),
]
QUERIES = 24


@pytest.fixture(scope="module")
def soft(gemma) -> SoftPrompt:
    ids = torch.tensor([gemma.tokenize(demonstration_prompt(BUILTIN_TASKS["sst2"], DEMOS))])
    with torch.inference_mode():
        rows = gemma.model.get_input_embeddings()(ids)[0].float().numpy()
    noise = np.random.default_rng(0).standard_normal(rows.shape).astype(np.float32)
    return SoftPrompt(gemma.name, rows + 0.02 * np.abs(rows).mean() * noise)


@pytest.fixture(scope="module")
def sst2() -> tuple[list[str], list[str]]:
    require_shared_data("sst2/stsa.binary.test")
    _, test = load_split("sst2", default_data_dir())
    return [r.text for r in test[:QUERIES]], [r.label for r in test[:QUERIES]]


def test_vllm_scores_a_soft_prompt_as_the_local_model_does(
    vllm_server, gemma, soft: SoftPrompt, sst2
) -> None:
    task = BUILTIN_TASKS["sst2"]
    queries, labels = sst2
    local = label_probabilities(SoftPromptedBackend(gemma, soft), task, "", queries)
    with VLLMHttpBackend(url=vllm_server.url, model=vllm_server.served_name) as remote:
        served = label_probabilities(vllm_soft_prompted(remote, soft, None), task, "", queries)
        without = label_probabilities(remote, task, "", queries)
    names = list(task.labels)

    def accuracy(probs: np.ndarray) -> int:  # records right
        return sum(names[i] == label for i, label in zip(probs.argmax(1), labels, strict=True))

    assert np.abs(local - served).max() < 0.06
    assert np.mean(local.argmax(1) == served.argmax(1)) >= 0.9
    assert abs(accuracy(local) - accuracy(served)) <= 2  # of 24: near ties in bfloat16
    assert accuracy(served) > accuracy(without)  # the demonstrations in it work
    assert np.abs(served - without).max() > 0.1  # and the soft prompt is really there


def test_a_soft_prompt_for_another_model_or_width_is_refused_before_any_request(
    soft: SoftPrompt,
) -> None:
    remote = VLLMHttpBackend(url="http://127.0.0.1:9", model=soft.model)  # nothing listens
    with pytest.raises(SoftPromptMismatch, match="smollm2-135m"):
        vllm_soft_prompted(remote, SoftPrompt("smollm2-135m", soft.embeddings), None)
    with pytest.raises(SoftPromptMismatch, match="dimensions"):
        vllm_soft_prompted(remote, SoftPrompt(soft.model, soft.embeddings[:, :8]), None)
    other = VLLMHttpBackend(url="http://127.0.0.1:9", model="org/some-model")
    with pytest.raises(NoEmbeddingTableError, match="DPSYN_EMBEDDINGS_DIR"):
        vllm_soft_prompted(other, SoftPrompt("org/some-model", soft.embeddings), None)
