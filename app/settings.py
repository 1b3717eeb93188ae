"""Service settings: one validated object, read from environment variables (``DPSYN_*``).

With no configuration at all the service runs embedded: SQLite in the working directory, an
in-process worker, and the packaged CPU model. The distributed deployment only changes
settings (a PostgreSQL URL, a Redis broker URL, a vLLM backend), never code paths.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.llm.factory import BackendKind


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DPSYN_", extra="ignore")

    environment: Literal["development", "production"] = "development"
    database_url: str = Field(
        "sqlite:///./dpsyn.db", description="SQLAlchemy URL; postgresql+psycopg://... in prod."
    )
    broker_url: str | None = Field(
        None, description="Celery broker (redis://...). None: run jobs in an in-process worker."
    )
    backend: BackendKind = BackendKind.TRANSFORMERS
    model: str | None = Field(None, description="Model name or path (see app.llm.models).")
    vllm_url: str | None = None
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="Local model precision; auto: bfloat16 where the hardware has it."
    )
    bootstrap_api_key: str | None = Field(
        None,
        description="An admin API key created at start-up for the 'default' tenant if missing.",
    )
    max_upload_bytes: int = Field(50 * 1024 * 1024, gt=0)
    max_records: int = Field(500_000, gt=0)
    job_timeout_s: int = Field(6 * 3600, gt=0, description="Longest job; sizes visibility_timeout.")
    host: str = "127.0.0.1"
    port: int = 8000

    # --- Job leases and recovery (docs/service.md, "Job leases and recovery") ---------------
    lease_duration_s: float = Field(
        60.0,
        gt=0,
        description="A running job whose worker has not renewed its lease for this "
        "long is failed by a reaper (charged if it read data). Keep worker clocks in sync well "
        "within it.",
    )
    heartbeat_interval_s: float = Field(
        10.0, gt=0, description="How often a worker renews the lease of the job it runs."
    )
    reaper_interval_s: float = Field(
        15.0,
        gt=0,
        description="How often each worker (and the embedded server) looks for expired leases.",
    )
    final_store_retry_s: float = Field(
        120.0,
        ge=0,
        description="How long a worker retries storing a job's outcome through a "
        "database outage before it leaves the job to its lease.",
    )

    # --- Deployment (docs/deploy.md) ----------------------------------------------------------
    migrate_on_start: bool = Field(
        True,
        description="dpsyn serve applies the migrations at start. Set false on API replicas "
        "that start after a one-shot 'dpsyn migrate', so that replicas never race on the schema.",
    )

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> Settings:
        if self.heartbeat_interval_s * 2 > self.lease_duration_s:
            raise ValueError(
                "DPSYN_HEARTBEAT_INTERVAL_S must be at most half of DPSYN_LEASE_DURATION_S "
                "(a live worker must renew its lease before it expires)"
            )
        return self

    @model_validator(mode="after")
    def _safe_in_production(self) -> Settings:
        if self.environment == "production":
            if self.database_url.startswith("sqlite"):
                raise ValueError("production needs a PostgreSQL DPSYN_DATABASE_URL, not SQLite")
            if self.bootstrap_api_key and len(self.bootstrap_api_key) < 32:
                raise ValueError("DPSYN_BOOTSTRAP_API_KEY must be at least 32 characters")
        return self


@lru_cache
def get_settings() -> Settings:
    return Settings()
