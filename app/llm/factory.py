"""Build the backend a job asks for (imports heavy libraries only when needed)."""

from __future__ import annotations

from enum import StrEnum

from app.llm.base import DEFAULT_KV_CACHE_MB, LLMBackend
from app.llm.models import DEFAULT_MODEL
from app.llm.retry import RetryingBackend, RetryPolicy

#: What a command-line run gets around a vLLM server (a long run outlives a server blip).
CLI_RETRY = RetryPolicy()


class BackendKind(StrEnum):
    TRANSFORMERS = "transformers"
    VLLM = "vllm"


class Dtype(StrEnum):
    """Precision of a local model; ``auto`` is bfloat16 where the hardware computes it."""

    AUTO = "auto"
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


def make_backend(
    kind: BackendKind,
    *,
    model: str | None,
    url: str | None,
    dtype: str = "auto",
    retry: RetryPolicy | None = CLI_RETRY,
    kv_cache_mb: float = DEFAULT_KV_CACHE_MB,
) -> LLMBackend:
    """A transformers backend (local model) or a vLLM HTTP client (``url`` required).

    ``dtype`` and ``kv_cache_mb`` (a synthesis job's KV store between token steps) apply to
    the local model only (see ``transformers_backend.resolve_dtype``);
    a vLLM server chooses its own. The vLLM client comes inside the one retry layer
    (:mod:`app.llm.retry`) with ``retry``; pass ``None`` when the caller wraps it itself
    (:class:`~app.llm.provider.BackendProvider`: the job runner and ``/complete`` do), so no
    call is retried twice. A local model raises no transient errors and is returned as is.
    """
    if kind is BackendKind.VLLM:
        if not url:
            raise ValueError("--url is required with --backend vllm")
        from app.llm.vllm_http import SERVED_MAX_LOGPROBS, VLLMHttpBackend, served_model

        # No model: the one the server serves (GET /v1/models), as scripts/vllm_serve.sh starts it.
        client = VLLMHttpBackend(
            url=url, model=model or served_model(url), max_logprobs=SERVED_MAX_LOGPROBS
        )
        return client if retry is None else RetryingBackend(client, retry=retry, context="vLLM")
    from app.llm.transformers_backend import TransformersBackend

    return TransformersBackend(model or DEFAULT_MODEL, dtype=dtype, kv_cache_mb=kv_cache_mb)
