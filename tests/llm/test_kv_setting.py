"""``DPSYN_KV_CACHE_MB`` reaches the local model a worker or the API builds (issue 23: the
per-job KV store was fixed at 512 MiB)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.llm import transformers_backend
from app.llm.base import DEFAULT_KV_CACHE_MB
from app.llm.provider import provider_for
from app.settings import Settings


class Recorded:
    def __init__(self, model: str, **options: object) -> None:
        self.model, self.options = model, options


@pytest.mark.parametrize(
    ("env", "expected"), [(None, DEFAULT_KV_CACHE_MB), ("0", 0.0), ("96", 96.0)]
)
def test_the_setting_reaches_the_transformers_backend(monkeypatch, env, expected):
    monkeypatch.delenv("DPSYN_KV_CACHE_MB", raising=False)
    if env is not None:
        monkeypatch.setenv("DPSYN_KV_CACHE_MB", env)
    monkeypatch.setattr(transformers_backend, "TransformersBackend", Recorded)
    backend = provider_for(Settings()).get()
    assert isinstance(backend, Recorded)
    assert backend.options["kv_cache_mb"] == expected


@pytest.mark.parametrize("bad", ["-1", "nan", "inf", "lots"])
def test_a_bad_value_is_refused_by_name(monkeypatch, bad):
    monkeypatch.setenv("DPSYN_KV_CACHE_MB", bad)
    with pytest.raises(ValidationError, match="kv_cache_mb"):
        Settings()
