"""How to start our server, in one place.

:func:`ours_command` is the only code in the benchmark that knows the serving command line
and its ``IABMA_*`` environment.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

READY_PATH = "/readyz"
BENCH_HASH_KEY = "bench-audit-hash-key-0123456789abcdef"
NO_CHAIN = "sqlite-nochain"


@dataclass(frozen=True)
class OursSettings:
    store: Path
    bundle: str
    workers: int  # uvicorn --workers
    # "sqlite", "postgres", "off", or "sqlite-nochain": the SQLite trail without its
    # tamper-evident chain (IABMA_AUDIT_CHAIN=false), only to measure what the chain costs
    audit: str
    audit_url: str  # a SQLite file URL or a PostgreSQL URL; unused when audit is "off"
    grpc_port: int | None = None  # IABMA_GRPC_PORT, on 127.0.0.1
    group_wait_ms: float | None = None  # IABMA_AUDIT_GROUP_WAIT_MS; None keeps the default


def ours_command(s: OursSettings, port: int) -> tuple[list[str], dict[str, str]]:
    """argv and environment that serve bundle ``s.bundle`` on 127.0.0.1:``port``."""
    # The image's command, so the bench runs uvicorn as the server does (its protocol
    # class, app/rest/wire.py); from a baseline checkout, that checkout's own.
    argv = [
        sys.executable,
        "-m",
        "app.server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(s.workers),
    ]
    # Each server keeps its metrics in a directory of its own (app/metrics/multiprocess.py).
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("IABMA_") and k != "PROMETHEUS_MULTIPROC_DIR"
    }
    env.update(
        IABMA_STORE=str(s.store),
        IABMA_MODEL_NAME=s.bundle,
        # Even with the trail off, point the URL at the run's temp dir so nothing lands in
        # ./var of the work tree.
        IABMA_AUDIT_URL=s.audit_url,
        # A PostgreSQL trail needs a key shared by its writers; the bench makes its own.
        IABMA_AUDIT_HASH_KEY=BENCH_HASH_KEY,
        IABMA_AUDIT_ENABLED="false" if s.audit == "off" else "true",
    )
    if s.audit == NO_CHAIN:
        env.update(IABMA_AUDIT_CHAIN="false")
    if s.group_wait_ms is not None:
        env.update(IABMA_AUDIT_GROUP_WAIT_MS=f"{s.group_wait_ms:g}")
    if s.grpc_port is not None:
        env.update(IABMA_GRPC_PORT=str(s.grpc_port), IABMA_GRPC_HOST="127.0.0.1")
    return argv, env
