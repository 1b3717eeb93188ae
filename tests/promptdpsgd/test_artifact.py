"""The stored soft prompt: bytes round-trip exactly, are identified by their hash, and
anything that is not one of our files is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save

from app.promptdpsgd.artifact import SoftPrompt, SoftPromptError


def test_round_trip_keeps_model_embeddings_and_hash() -> None:
    emb = np.random.default_rng(0).normal(size=(5, 16))
    prompt = SoftPrompt("gemma", emb)
    back = SoftPrompt.from_bytes(prompt.to_bytes())
    assert back.model == "gemma"
    assert back.embeddings.dtype == np.float32
    assert np.array_equal(back.embeddings, emb.astype(np.float32))
    assert back.sha256 == prompt.sha256
    assert SoftPrompt("other", emb).sha256 != prompt.sha256  # the model is part of the file


@pytest.mark.parametrize(
    "data",
    [b"", b"not a tensor file", save({"x": np.zeros((2, 2), np.float32)})],
    ids=["empty", "garbage", "foreign-safetensors"],
)
def test_other_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(SoftPromptError):
        SoftPrompt.from_bytes(data)


@pytest.mark.parametrize("shape", [(0, 4), (4,), (2, 2, 2)])
def test_shape_must_be_a_matrix(shape: tuple[int, ...]) -> None:
    with pytest.raises(SoftPromptError):
        SoftPrompt("m", np.zeros(shape))


def test_non_finite_is_refused() -> None:
    with pytest.raises(SoftPromptError):
        SoftPrompt("m", np.array([[1.0, np.nan]]))
