"""One backend per process, built on first use from the settings (models load slowly)."""

from __future__ import annotations

import threading
from typing import Protocol

from app import heap
from app.llm.base import DEFAULT_KV_CACHE_MB, LLMBackend
from app.llm.factory import BackendKind, make_backend
from app.llm.fair_lock import FairLock


class BackendProvider:
    """Lazily builds and then shares one backend; thread-safe."""

    def __init__(
        self,
        kind: BackendKind,
        *,
        model: str | None,
        url: str | None,
        dtype: str = "auto",
        kv_cache_mb: float = DEFAULT_KV_CACHE_MB,
        embeddings_dir: str | None = None,
    ) -> None:
        self.kind, self.model, self.url, self.dtype = kind, model, url, dtype
        self.kv_cache_mb = kv_cache_mb
        # vLLM: the served model's folder, for soft prompts sent as embeddings
        # (app.promptdpsgd.vllm; None: the packaged model's, where it is one)
        self.embeddings_dir = embeddings_dir
        self._backend: LLMBackend | None = None
        self._lock = threading.Lock()
        # Forward passes of one local model are not re-entrant across threads; serialise
        # them, handing the model to whoever has had it least (app.llm.fair_lock).
        self.use_lock = FairLock()

    def get(self) -> LLMBackend:
        with self._lock:
            if self._backend is None:
                # No retry layer here: the runner and /complete add theirs, with the lock.
                self._backend = make_backend(
                    self.kind,
                    model=self.model,
                    url=self.url,
                    dtype=self.dtype,
                    retry=None,
                    kv_cache_mb=self.kv_cache_mb,
                )
                heap.freeze_long_lived()  # the model lives as long as the process
            return self._backend


class BackendSettings(Protocol):
    """The settings a provider is built from (``app.settings.Settings`` has them; this
    package does not import the settings, which import it)."""

    @property
    def backend(self) -> BackendKind: ...

    @property
    def model(self) -> str | None: ...

    @property
    def vllm_url(self) -> str | None: ...

    @property
    def dtype(self) -> str: ...

    @property
    def kv_cache_mb(self) -> float: ...

    @property
    def embeddings_dir(self) -> str | None: ...


def provider_for(settings: BackendSettings) -> BackendProvider:
    """The provider of the configured backend: the one place the API, the in-process worker
    and the Celery worker build theirs."""
    return BackendProvider(
        settings.backend,
        model=settings.model,
        url=settings.vllm_url,
        dtype=settings.dtype,
        kv_cache_mb=settings.kv_cache_mb,
        embeddings_dir=settings.embeddings_dir,
    )


class StaticProvider(BackendProvider):
    """A provider around an existing backend (tests, benchmarks)."""

    def __init__(self, backend: LLMBackend) -> None:
        super().__init__(BackendKind.TRANSFORMERS, model=None, url=None)
        self._backend = backend
