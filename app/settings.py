"""Service settings: one validated object, read from environment variables (``DPSYN_*``).

With no configuration at all the service runs embedded: SQLite in the working directory, an
in-process worker, and the packaged CPU model. The distributed deployment only changes
settings (a PostgreSQL URL, a Redis broker URL, a vLLM backend), never code paths.
"""

from __future__ import annotations

import importlib.metadata
import ipaddress
from functools import lru_cache
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.documented import one_line_descriptions
from app.llm.base import DEFAULT_KV_CACHE_MB
from app.llm.factory import BackendKind
from app.privacy.unit import COUNT_RELEASE_SHARE

#: The entry-point group a package declares its method modules in (docs/service.md).
METHOD_ENTRY_POINTS = "dpsyn.methods"


class Settings(BaseSettings):
    # An empty variable counts as unset: compose passes "${VAR:-}" for settings left blank.
    model_config = SettingsConfigDict(
        env_prefix="DPSYN_", extra="ignore", env_ignore_empty=True, use_attribute_docstrings=True
    )

    environment: Literal["development", "production"] = "development"
    database_url: str = "sqlite:///./dpsyn.db"
    """SQLAlchemy URL; postgresql+psycopg://... in prod."""
    broker_url: str | None = None
    """Celery broker (redis://...). None: run jobs in an in-process worker."""
    runtime: str = Field("workers.runtime", pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
    """Module that runs jobs (its queue and worker; app.services.queue.Runtime)."""
    backend: BackendKind = BackendKind.TRANSFORMERS
    model: str | None = None
    """Model name or path (see app.llm.models)."""
    vllm_url: str | None = None
    vllm_start_wait_s: float = Field(300.0, ge=0)
    """How long 'dpsyn worker' waits for an unreachable vLLM server at start before it exits (a
    misconfigured one fails the start at once)."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Local model precision; auto: bfloat16 where the hardware has it."""
    kv_cache_mb: float = Field(DEFAULT_KV_CACHE_MB, ge=0, allow_inf_nan=False)
    """Most MiB of KV cache a synthesis job keeps on the local model between its token steps
    (incremental decoding; 0 turns it off). One per running job."""
    bootstrap_api_key: str | None = None
    """An admin API key created at start-up for the 'default' tenant if missing."""
    count_release_share: float = Field(COUNT_RELEASE_SHARE, gt=0.0, le=0.5)
    """The share of a dataset's budget (of its epsilon and of its delta) that its one release of
    label counts costs, charged once when a plan first needs the counts (docs/privacy.md, 'The
    count release')."""
    max_upload_bytes: int = Field(50 * 1024 * 1024, gt=0)
    max_records: int = Field(500_000, gt=0)
    max_record_chars: int = Field(100_000, gt=0)
    """Longest text or label of one record, in characters."""
    max_body_bytes: int = Field(1024 * 1024, gt=0)
    """Largest request body on every route but uploads."""
    # --- Rate limits (app/api/limits.py; docs/service.md, "Limits") ---------------------------
    rate_limit_per_minute: int | None = Field(None, gt=0)
    """Requests per minute per API key, counted after the key is checked (API and dashboard;
    shared by all API processes through Redis); None: no limit."""
    rate_limit_burst: int | None = Field(None, gt=0)
    """Requests a key may make at once; default: the per-minute rate."""
    auth_failures_per_minute: int = Field(30, ge=0)
    """Failed API-key checks per client address per minute; past it the address gets 429 before
    any key is looked up. 0: no limit."""
    signin_failures_per_minute: int = Field(10, ge=0)
    """Failed dashboard sign-ins per client address per minute. 0: none."""
    ui_model_calls_per_minute: int = Field(10, ge=0)
    """Dashboard model calls (/ui/prompts/{id}/complete) per key per minute, on top of the key's
    own limit. 0: no limit."""
    embeddings_dir: str | None = None
    """vLLM backend: a folder with the served model's config.json and safetensors files, whose
    input embeddings put a soft prompt (promptdpsgd) in front of a query as vLLM prompt
    embeddings. Default: the packaged model's folder when the served model is one."""
    prompt_preload: int = Field(10_000, ge=0)
    """Prompt sets an API process reads into its prompt cache when it starts (newest first, in
    the background, within the cache's 64 MiB): downstream reads of them then cost no query.
    0: none."""
    openai_max_tokens: int = Field(256, ge=1, le=32_768)
    """The OpenAI-compatible endpoint: the most tokens one answer may ask for (max_tokens; also
    the default). A request over it is refused (422 max_tokens_too_large)."""
    openai_max_input_chars: int = Field(16_000, ge=1)
    """The OpenAI-compatible endpoint: the most characters of the app's own messages (or prompt)
    in one request, the DP prompt not counted."""
    # --- Engine time (app/api/engine_gate.py; docs/service.md, "Engine time") -------------
    generations_per_key: int | None = Field(None, ge=0)
    """Answers of one API key running at once on the model routes (chat and text completions,
    /complete). None: the engine's default (embedded 2, vLLM 32); 0: no bound."""
    generations_per_tenant: int | None = Field(None, ge=0)
    """Answers of one tenant at once. None: the engine's default (embedded 3, vLLM 128)."""
    engine_generations: int | None = Field(None, ge=0)
    """Answers at once on the engine in all. None: the engine's default (embedded 4, vLLM no
    bound)."""
    generation_wait_s: float = Field(10.0, ge=0)
    """Longest wait of an answer past those bounds before 429 engine_busy."""
    prompt_tokens_per_minute: int | None = Field(None, ge=0)
    """Prompt tokens one key's answers may have the engine read a minute (chat and text
    completions). None: the engine's default (embedded 20,000, vLLM no bound); 0: no bound."""
    # --- Records at rest (app/db/record_keys.py; docs/service.md, "Records at rest") -------
    record_keys_dir: str | None = None
    """The folder of the datasets' data keys, outside the database (every API and worker
    process must see the same one). None: ./.dpsyn/record_keys."""
    record_kek: str | None = Field(None, repr=False)
    """The key-encryption key (32 bytes, base64) that wraps the data keys. None: the key
    folder's own kek file, made on first use."""
    record_retention_days: float | None = Field(None, gt=0)
    """Days after a private dataset's last job ended (with none queued or running) after which
    its records are dropped and their data key destroyed; its budget, ledger and prompts are
    kept. None: records are kept until the dataset is deleted."""
    limits_redis_url: str | None = None
    """Redis holding the limits' buckets, shared by all API processes. Default: broker_url when
    it is a Redis URL; without either each process counts in memory."""
    metrics_token: str | None = Field(None, min_length=16)
    """Bearer token of /metrics. Unset: /metrics is open but has no per-tenant or per-dataset
    series; set: it needs the token and adds them."""
    job_timeout_s: int = Field(6 * 3600, gt=0)
    """Longest job; sizes visibility_timeout."""
    host: str = "127.0.0.1"
    port: int = 8000
    # Capacity (see docs/service.md, "Capacity and overload"). One admitted request holds at
    # most one connection of each pool at a time, so with ``max_concurrent_requests`` no larger
    # than ``db_pool_size`` no request ever queues for a connection; past the limit the
    # server answers 503 with Retry-After at once instead of letting requests pile up.
    # 16, not anyio's 40: one Python process serves a few hundred requests a second at
    # most, so more handlers at once only add lock and CPU contention (bench/load.py: on 2
    # cores, 40 at once cost 30% more CPU per answer than 8); 16 still covers database
    # waits and a few slow backend calls. Raise it for many concurrent /complete calls to
    # a remote vLLM server.
    request_threads: int = Field(16, gt=0)
    """Threads running the API's blocking handlers (anyio's pool)."""
    max_concurrent_requests: int | None = Field(None, ge=0)
    """Requests handled at once (not /healthz); more wait, then get 503. None: request_threads.
    0: no limit."""
    max_waiting_requests: int = Field(1000, ge=0)
    """Requests that may wait for a slot; past it, 503 at once."""
    admission_wait_s: float = Field(0.5, ge=0)
    """Longest wait for a slot before 503 (keeps latency bounded)."""
    db_pool_size: int | None = Field(None, gt=0)
    """Connections per pool of the API. None: request_threads."""
    db_pool_timeout_s: float = Field(2.0, gt=0)
    """Longest wait for a pooled connection before 503."""
    retry_after_s: int = Field(1, ge=1)
    """Retry-After of a 503 'overloaded'."""
    # Job submissions plan (seconds of calibration) in a lane of their own, so that a burst
    # of them never holds more than this many request slots (app/api/overload.py).
    planning_concurrency: int = Field(2, ge=0)
    """Submissions planned at once (each holds a request slot meanwhile; at most
    MAX_CONCURRENT_REQUESTS - 1). 0: no lane, submissions queue like other requests."""
    advice_per_tenant: int = Field(3, ge=1)
    """Advice runs one tenant may have queued or running; one more is answered 429 advice_busy."""
    advice_in_api: bool | None = None
    """Whether the API process runs queued advice runs. None: when it runs jobs itself (embedded,
    no broker_url); otherwise each worker does (dpsyn worker)."""
    planning_per_tenant: int = Field(1, ge=1)
    """Plans one tenant may have running at once (at most planning_concurrency): the rest of the
    lane stays free for the other tenants."""
    planning_tenant_queue: int = Field(8, ge=0)
    """A tenant's plans that may wait past its share; one more is answered 429 planning_busy at
    once."""
    planning_wait_s: float = Field(120.0, ge=0)
    """Longest wait of a submission for planning before 503."""

    def api_runs_advice(self) -> bool:
        """Whether the API process runs advice (``advice_in_api``; None: when embedded)."""
        return self.broker_url is None if self.advice_in_api is None else self.advice_in_api

    @model_validator(mode="after")
    def _capacity(self) -> Settings:
        # Sized from the thread pool unless set: every thread can hold a connection, so
        # none blocks on the pool while a finished request waits for a thread to release
        # its own (else every thread can wait for a connection only a thread can give back).
        if self.max_concurrent_requests is None:
            self.max_concurrent_requests = self.request_threads
        if self.db_pool_size is None:
            self.db_pool_size = max(self.request_threads, self.max_concurrent_requests)
        if self.max_concurrent_requests > self.db_pool_size:
            raise ValueError(
                "DPSYN_MAX_CONCURRENT_REQUESTS must not exceed DPSYN_DB_POOL_SIZE: admitted "
                "requests would queue for a connection"
            )
        return self

    # --- Job leases and recovery (docs/service.md, "Job leases and recovery") ---------------
    lease_duration_s: float = Field(60.0, gt=0)
    """A running job whose worker has not renewed its lease for this long is failed by a reaper
    (charged if it read data). Keep worker clocks in sync well within it."""
    heartbeat_interval_s: float = Field(10.0, gt=0)
    """How often a worker renews the lease of the job it runs."""
    reaper_interval_s: float = Field(15.0, gt=0)
    """How often each worker (and the embedded server) looks for expired leases."""
    final_store_retry_s: float = Field(120.0, ge=0)
    """How long a worker retries storing a job's outcome through a database outage before it
    leaves the job to its lease."""
    redispatch_after_s: float = Field(60.0, gt=0)
    """A queued job whose task was last sent longer ago than this is sent again by a dispatcher
    (every worker and API process; checked every quarter of it), so that a task lost on its
    way (API killed, Redis emptied) strands no job."""

    # --- Deployment (docs/deploy.md) ----------------------------------------------------------
    worker_alive_file: str | None = None
    """A file 'dpsyn worker' touches while it is alive (its reaper and job heartbeats): 'dpsyn
    worker-health' reads its age. Unset: not written."""
    migrate_on_start: bool = True
    """dpsyn serve applies the migrations at start. Set false on API replicas that start after a
    one-shot 'dpsyn migrate', so that replicas never race on the schema."""
    forwarded_allow_ips: str = ""
    """The reverse proxies whose X-Forwarded-For and X-Forwarded-Proto headers dpsyn serve
    believes: comma-separated IP addresses or networks (CIDR), or '*' (any sender). Empty (the
    default): none, so a client is the address that connected. The only source: uvicorn's
    FORWARDED_ALLOW_IPS is not read."""

    # --- Web dashboard (docs/dashboard.md) ------------------------------------------------
    ui_secret: SecretStr | None = Field(None, min_length=32)
    """Key that signs the dashboard's session cookies; required by dpsyn serve in production.
    Unset: dpsyn serve keeps one in its data directory (development), else each process makes
    a random one (sessions then end at restart and do not cross replicas: set it behind
    several)."""
    ui_session_ttl_s: int = Field(8 * 3600, gt=0)
    """How long a dashboard sign-in lasts (absolute expiry)."""

    # --- Budgets follow the records (docs/privacy.md) -----------------------------------
    fingerprint_key: SecretStr | None = Field(None, min_length=32)
    """Key of the private records' fingerprints (HMAC-SHA256 of each record's normalised text,
    by which a re-upload of the same records is recognised); required by dpsyn serve in
    production, the same on every API replica and never changed (a new key recognises no
    record uploaded before). Unset: dpsyn serve keeps one in its data directory
    (development), else each process makes a random one."""

    # --- Plug-in methods (docs/service.md, "Methods: one registry") ---------------------
    method_modules: str = ""
    """Comma-separated Python modules that register methods (app.methods.registry.register) when
    imported. Every API and worker process imports them at start, so each runs the methods the
    others admit."""

    def method_module_names(self) -> list[str]:
        """The modules of ``method_modules``, in order, without blanks, then those that
        installed packages declare as entry points of the group ``dpsyn.methods`` (a plug-in
        package's ``[project.entry-points."dpsyn.methods"] name = "package.module"``), each
        once."""
        named = [name.strip() for name in self.method_modules.split(",") if name.strip()]
        declared = [
            entry.value.split(":", 1)[0].strip()
            for entry in importlib.metadata.entry_points(group=METHOD_ENTRY_POINTS)
        ]
        return list(dict.fromkeys(named + declared))

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _proxy_addresses(cls, value: str) -> str:
        """The list without blanks; each entry an address or network as uvicorn reads it (a
        network with host bits set, or a name, would be compared as text and never match)."""
        entries = [entry.strip() for entry in value.split(",") if entry.strip()]
        if entries == ["*"]:
            return "*"
        for entry in entries:
            try:
                ipaddress.ip_network(entry)  # an address is a network of one
            except ValueError:
                raise ValueError(
                    f"DPSYN_FORWARDED_ALLOW_IPS: {entry!r} is not an IP address or network "
                    "(e.g. 10.0.0.5 or 10.0.0.0/24); '*' (any sender) stands alone"
                ) from None
        return ",".join(entries)

    def forwarded_allow_list(self) -> list[str]:
        """The proxies of ``forwarded_allow_ips`` as uvicorn takes them (``[]``: none)."""
        return [entry for entry in self.forwarded_allow_ips.split(",") if entry]

    def check_serving(self) -> None:
        """ValueError, naming the setting, if an API server cannot start with these settings.

        Production is one deployment however many replicas serve it: they must sign the
        dashboard's sessions with one key, which a replica cannot make up on its own (a key
        kept in each replica's folder would refuse every other replica's sign-ins)."""
        if self.environment == "production" and self.ui_secret is None:
            raise ValueError(
                "production needs DPSYN_UI_SECRET (32+ characters, e.g. openssl rand -base64 "
                "48), the same on every API replica: it signs the dashboard's sessions"
            )
        if self.environment == "production" and self.fingerprint_key is None:
            raise ValueError(
                "production needs DPSYN_FINGERPRINT_KEY (32+ characters, e.g. openssl rand "
                "-base64 48), the same on every API replica and never changed: it keys the "
                "fingerprints by which re-uploaded records find their budget"
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


one_line_descriptions(Settings)  # its docstrings are the variables' descriptions


@lru_cache
def get_settings() -> Settings:
    return Settings()
