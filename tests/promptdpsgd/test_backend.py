"""SoftPromptedBackend: the soft prompt really is in front of every prompt, with the real
model; wrong models and remote backends are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.llm.retry import RetryingBackend, RetryPolicy
from app.promptdpsgd.artifact import SoftPrompt
from app.promptdpsgd.backend import (
    GradientAccessError,
    SoftPromptedBackend,
    SoftPromptMismatch,
    local_backend,
)
from app.synthesis.scoring import label_probabilities
from app.synthesis.tasks import BUILTIN_TASKS
from tests.synthesis.fake_backend import FakeBackend

QUERIES = ["a gorgeous, witty, seductive movie.", "the plot is a dull, tedious mess."]


def embeddings_of(backend, text: str) -> np.ndarray:
    """The model's own input embeddings of ``text`` (a hard prompt written as a soft one)."""
    ids = torch.tensor([backend.tokenize(text)])
    with torch.inference_mode():
        return backend.model.get_input_embeddings()(ids)[0].float().numpy()


def test_a_soft_prompt_of_token_embeddings_answers_like_those_tokens(gemma):
    task = BUILTIN_TASKS["sst2"]
    hard = "Review sentiment, positive or negative.\n\n"
    soft = SoftPrompt(gemma.name, embeddings_of(gemma, hard))
    wrapped = SoftPromptedBackend(gemma, soft)
    with_soft = label_probabilities(wrapped, task, "", QUERIES)
    with_text = label_probabilities(gemma, task, hard, QUERIES)
    np.testing.assert_allclose(with_soft, with_text, atol=2e-3)
    # ... and the soft prompt has an effect: without it the answers differ.
    without = label_probabilities(gemma, task, "", QUERIES)
    assert np.abs(with_soft - without).max() > 1e-2


def test_the_retry_layer_is_unwrapped_and_remote_backends_are_refused(gemma):
    wrapped = RetryingBackend(gemma, retry=RetryPolicy())
    assert local_backend(wrapped) is gemma
    with pytest.raises(GradientAccessError, match="FakeBackend"):
        local_backend(RetryingBackend(FakeBackend(), retry=RetryPolicy()))


def test_a_soft_prompt_for_another_model_is_refused(gemma):
    width = gemma.model.get_input_embeddings().weight.shape[1]
    with pytest.raises(SoftPromptMismatch, match="smollm2-135m"):
        SoftPromptedBackend(gemma, SoftPrompt("smollm2-135m", np.zeros((4, width))))
    with pytest.raises(SoftPromptMismatch, match="dimensions"):
        SoftPromptedBackend(gemma, SoftPrompt(gemma.name, np.zeros((4, width + 1))))
