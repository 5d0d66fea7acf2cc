"""A real uvicorn with the gRPC port on, for the Open Inference Protocol client tests.

The server runs in its own process: tritonclient's generated protobuf modules and the
server's define the same ``inference.*`` messages, which one Python process cannot hold
twice.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tests.support.bundles import Bundles
from tests.support.harness import UvicornProcess
from tests.support.services import free_port


@dataclass(frozen=True)
class Served:
    proc: UvicornProcess
    name: str
    grpc_port: int
    audit_db: Path

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.proc.port}"

    @property
    def grpc(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def base_url(self) -> str:
        return self.proc.base_url

    def audit_rows(self) -> int:
        with sqlite3.connect(self.audit_db) as conn:
            return int(conn.execute("select count(*) from iabma_audit_log").fetchone()[0])


def serve(bundles: Bundles, name: str, tmp: Path, **env: str) -> Served:
    """The server, not yet waited for; its audit trail is ``tmp/audit.db``."""
    grpc_port = free_port()
    settings = {
        "IABMA_STORE": str(bundles.store),
        "IABMA_MODEL_NAME": name,
        "IABMA_AUDIT_URL": f"sqlite:///{tmp / 'audit.db'}",
        "IABMA_LOG_LEVEL": "WARNING",
        "IABMA_GRPC_PORT": str(grpc_port),
        "IABMA_GRPC_HOST": "127.0.0.1",
        **env,
    }
    return Served(UvicornProcess(settings), name, grpc_port, tmp / "audit.db")
