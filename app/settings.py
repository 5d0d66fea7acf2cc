"""Every knob of the service, read from ``IABMA_*`` environment variables.

:func:`load_settings` is called by ``create_app`` (never at import time) and turns a bad
value into one :class:`SettingsError` line that names the environment variable, so a
misconfigured container fails at start-up and says why.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from app.bundle.manifest import check_safe_name

ENV_PREFIX = "IABMA_"
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[?[0-9A-Fa-f:.]{2,45}\]?")
DEFAULT_AUDIT_URL = "sqlite:///./var/audit.db"


class SettingsError(Exception):
    """A setting that cannot be used; the message starts with the variable's name."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    store: Path = Field(Path("models_store"), description="directory holding the bundles")
    model_name: str = Field("demo", min_length=1, description="bundle name under the store")
    model_version: str | None = Field(None, description="pin a version instead of LATEST")

    audit_enabled: bool = Field(
        True, description="keep the audit trail; off only for benchmarks and local trials"
    )
    # Benchmarks only (bench/serve_speed.py measures what the chain costs): a trail written
    # without its chain fails audit-verify, every record named as inserted outside.
    audit_chain: bool = Field(
        True,
        description="seal each group commit into the tamper-evident chain; never off in "
        "production, only to measure the chain's cost",
    )
    audit_url: str = Field(DEFAULT_AUDIT_URL, description="SQLAlchemy URL of the audit trail")
    audit_payload: Literal["full", "hash", "off"] = Field(
        "hash", description="what the trail keeps of each input: all of it, its sha256, nothing"
    )
    audit_batch_max: int = Field(256, ge=1, le=10_000, description="records per group commit")
    # 4 ms: measured on 2 cores with two workers on PostgreSQL at 32 connections, groups grow
    # from 5.6 to 12.8 records, PostgreSQL's CPU per request falls from 57 to 35 us and
    # throughput rises by a fifth; one client never waits (bench/audit_group.py).
    audit_group_wait_ms: float = Field(
        4.0,
        ge=0,
        le=100,
        description=(
            "how long a group commit waits for the records of requests already being "
            "served (a lone request never waits); 0 commits whatever is queued"
        ),
    )
    audit_timeout_seconds: float = Field(
        10.0, gt=0, le=600, description="wait for a commit, and for the store at start-up"
    )
    audit_unready_seconds: float = Field(
        5.0,
        gt=0,
        le=3600,
        description=(
            "after commits have failed this long, /readyz answers 503 naming the cause, "
            "until a probe commit succeeds"
        ),
    )
    audit_retention_days: float | None = Field(
        None,
        gt=0,
        le=36_500,
        description="remove records (and their outcomes) older than this in the background",
    )

    max_batch_rows: int = Field(1000, ge=1, le=1_000_000)
    max_body_bytes: int = Field(
        8_388_608,
        ge=1024,
        le=1_073_741_824,
        description="largest request body; 8 MiB holds 1000 rows of 100 features",
    )

    admin_token: SecretStr | None = Field(None, description="enables POST /admin/reload")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["json", "text"] = "json"
    ort_intra_op_threads: int = Field(1, ge=1, le=256)
    unknown_category: Literal["reject", "missing"] = Field(
        "reject", description="an unseen category: a 422 naming it, or treated as missing"
    )
    ignore_training_columns: bool = Field(
        False,
        description="a row may also hold the training file's target and --drop columns, "
        "which are ignored; off: they are refused as unknown_feature",
    )
    batching: bool = Field(True, description="concurrent small requests share one run of the graph")
    # 0: the requests in flight that a batch waited for were mostly awaiting their audit
    # commit, and cannot join it; REST at 32 connections served 9-19% more without the
    # wait, gRPC the same (docs/benchmarks.md, "Where the time goes").
    batch_wait_ms: float = Field(
        0.0,
        ge=0,
        le=100,
        description=(
            "how long a batch waits for more requests while others are in flight (a lone "
            "request never waits); 0 takes only those ready now"
        ),
    )
    batch_max_rows: int = Field(256, ge=1, le=100_000, description="rows in one batched run")
    # grpc.aio accepts one call per turn of the event loop, so concurrent calls never meet
    # in a batch by themselves; a single row's graph was ~40% of a call's CPU.
    grpc_batch_gap_ms: float = Field(
        2.0,
        ge=0,
        le=100,
        description=(
            "while other requests are in flight, a gRPC call's batch waits this long for the "
            "next call, again after each that comes (0: no wait)"
        ),
    )
    grpc_batch_cap_ms: float = Field(
        8.0, ge=0, le=100, description="the longest a gRPC call's batch waits in all"
    )
    # -- drift of the gate's weights without labels (app/metrics/drift.py) --
    drift_window_seconds: float = Field(
        3600.0,
        ge=60,
        le=7 * 86_400,
        description="the sliding window of served weights compared with the training rows",
    )
    drift_min_rows: int = Field(
        100, ge=1, le=10_000_000, description="rows the window needs before drift is reported"
    )
    realised_window_rows: int = Field(
        500,
        ge=10,
        le=1_000_000,
        description="the last outcomes per worker whose realised NLL the alert gauges compare "
        "with the bundle's held-out reference",
    )
    drain_seconds: float = Field(
        0.0, ge=0, le=300, description="after SIGTERM, keep serving this long with /readyz 503"
    )

    # --- running a fleet: workers, rollout, access control, metrics ----------------------
    workers: int = Field(1, ge=1, le=64, description="uvicorn worker processes (iabma serve)")
    reload_interval_seconds: float = Field(
        5.0, ge=0, le=3600, description="how often each worker checks LATEST; 0 turns it off"
    )
    api_keys: SecretStr | None = Field(None, description="comma-separated keys for data routes")
    api_keys_file: Path | None = Field(None, description="a file of API keys, one per line")
    feedback_keys: SecretStr | None = Field(
        None, description="keys for POST /feedback; the API keys when unset"
    )
    feedback_keys_file: Path | None = None
    auditor_keys: SecretStr | None = Field(
        None, description="keys for /weights, /performance and /audit; the API keys when unset"
    )
    auditor_keys_file: Path | None = None
    metrics_keys: SecretStr | None = Field(None, description="keys for /metrics; open when unset")
    metrics_keys_file: Path | None = None
    admin_token_file: Path | None = Field(None, description="a file holding the admin token")
    audit_hash_key: SecretStr | None = Field(
        None, description="HMAC key of the hash audit mode; SQLite trails make one if unset"
    )
    audit_hash_key_file: Path | None = None
    # -- signed checkpoints of the audit chains, kept outside the database --
    audit_signing_key: SecretStr | None = Field(
        None,
        description="Ed25519 private key (PEM) that signs the audit chains' checkpoints; "
        "unset: no checkpoints",
    )
    audit_signing_key_file: Path | None = None
    audit_checkpoint_file: Path | None = Field(
        None, description="a file each checkpoint is appended to; they also go to the log"
    )
    audit_checkpoint_seconds: float = Field(
        60.0, gt=0, le=86_400, description="how often the chains' heads are signed"
    )
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="serve /metrics on this port instead of the main one"
    )
    metrics_host: str = Field(
        "127.0.0.1",
        min_length=1,
        description=(
            "address the metrics port binds: loopback by default; 0.0.0.0 for a scraper on "
            "another host (then set IABMA_METRICS_KEYS)"
        ),
    )
    cors_origins: str = Field(
        "", description="comma-separated origins allowed by CORS; empty turns CORS off"
    )

    # -- Open Inference Protocol over gRPC (app/oip_grpc) --
    grpc_port: int | None = Field(
        None, ge=1, le=65535, description="serve the OIP over gRPC on this port; unset: off"
    )
    grpc_host: str = Field("0.0.0.0", min_length=1, description="address the gRPC port binds")
    grpc_grace_seconds: float = Field(
        5.0, ge=0, le=300, description="at shutdown, how long gRPC calls in flight may finish"
    )

    @field_validator("grpc_port", mode="before")
    @classmethod
    def _blank_port_is_off(cls, v: Any) -> Any:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("metrics_host", "grpc_host")
    @classmethod
    def _host(cls, v: str) -> str:
        # An address or a host name: what a socket can bind, not a URL or a list.
        if not _HOST.fullmatch(v):
            raise ValueError("expected an IP address or a host name, e.g. 127.0.0.1 or 0.0.0.0")
        return v

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, v: Any) -> Any:
        return v.upper() if isinstance(v, str) else v

    @field_validator(
        "model_version",
        "admin_token",
        "api_keys",
        "feedback_keys",
        "auditor_keys",
        "metrics_keys",
        "audit_hash_key",
        "audit_signing_key",
        "audit_signing_key_file",
        "audit_checkpoint_file",
        "api_keys_file",
        "feedback_keys_file",
        "auditor_keys_file",
        "metrics_keys_file",
        "admin_token_file",
        "audit_hash_key_file",
        "metrics_port",
        mode="before",
    )
    @classmethod
    def _blank_is_unset(cls, v: Any) -> Any:
        # Compose files often pass VAR= to mean "not set".
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("model_name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        return check_safe_name(v, "model name")

    @field_validator("model_version")
    @classmethod
    def _safe_version(cls, v: str | None) -> str | None:
        return None if v is None else check_safe_name(v, "model version")

    @field_validator("audit_url")
    @classmethod
    def _audit_url(cls, v: str) -> str:
        return str(normalise_audit_url(v).render_as_string(hide_password=False))

    @model_validator(mode="after")
    def _secret_files(self) -> Settings:
        # Kubernetes and Docker mount secrets as files; IABMA_<NAME>_FILE reads one.
        for name in sorted(SECRET_FIELDS):
            path = getattr(self, f"{name}_file")
            if path is None:
                continue
            var = f"{ENV_PREFIX}{name.upper()}"
            if getattr(self, name) is not None:
                raise ValueError(f"{var} and {var}_FILE are both set; give one of them")
            try:
                text = path.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"{var}_FILE: cannot read {str(path)!r}: {exc}") from None
            if not text:
                raise ValueError(f"{var}_FILE: {str(path)!r} is empty")
            object.__setattr__(self, name, SecretStr(text))
        return self

    def keys(self, name: str) -> tuple[str, ...]:
        """The keys of ``api_keys``, ``feedback_keys``, ``auditor_keys`` or
        ``metrics_keys``: separated by commas or lines, blanks and ``#`` comments dropped."""
        secret = getattr(self, name)
        if secret is None:
            return ()
        parts = secret.get_secret_value().replace("\n", ",").split(",")
        return tuple(p.strip() for p in parts if p.strip() and not p.strip().startswith("#"))


def normalise_audit_url(text: str) -> URL:
    """SQLite files and PostgreSQL through psycopg 3 are the two supported trails."""
    try:
        url = make_url(text)
    except ArgumentError:
        raise ValueError(f"{text!r} is not a database URL") from None
    backend = url.get_backend_name()
    if backend == "sqlite":
        database = url.database or ""
        if database in ("", ":memory:") or database.startswith("file::memory:"):
            raise ValueError("an in-memory SQLite trail is not durable; give a file path")
        return url
    if backend == "postgresql":
        if url.get_driver_name() not in ("psycopg", "psycopg2"):
            raise ValueError("PostgreSQL is reached through psycopg: use postgresql+psycopg://")
        # psycopg2 is not installed in the serving image; psycopg 3 speaks the same URLs.
        return url.set(drivername="postgresql+psycopg")
    raise ValueError(f"the audit trail lives in SQLite or PostgreSQL, not {backend!r}")


SECRET_FIELDS = frozenset(
    {
        "admin_token", "api_keys", "feedback_keys", "auditor_keys", "metrics_keys",
        "audit_hash_key", "audit_signing_key",
    }
)  # fmt: skip


def _describe(err: ErrorDetails) -> str:
    field = str(err["loc"][0]) if err.get("loc") else ""
    if not field:
        return str(err["msg"]).removeprefix("Value error, ")
    var = f"{ENV_PREFIX}{field.upper()}" if field else ENV_PREFIX + "*"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if field in SECRET_FIELDS:
        return f"{var}: {msg}"
    return f"{var}: {msg} (got {err.get('input')!r})"


def load_settings(**overrides: Any) -> Settings:
    """Read the environment (plus ``overrides``); raise :class:`SettingsError` if invalid."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise SettingsError("; ".join(_describe(e) for e in exc.errors())) from None
