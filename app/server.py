"""``iabma serve``: validate the settings, then run uvicorn on the app factory.

uvicorn gets the factory's import string rather than an app object so that ``--workers``
can start several processes, each building the same app from the ``IABMA_*`` environment.
"""

from __future__ import annotations

import sys

from app.settings import SettingsError, load_settings

FACTORY = "app.main:create_app"


def serve(host: str = "127.0.0.1", port: int = 8000, workers: int = 1) -> int:
    """Run until stopped; return the process exit code (2 for a bad setting)."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"iabma serve: error: {exc}", file=sys.stderr)
        return 2
    if workers < 1:
        print(f"iabma serve: error: --workers must be at least 1, got {workers}", file=sys.stderr)
        return 2
    if workers > 1 and settings.audit_enabled and settings.audit_url.startswith("sqlite"):
        print(
            f"iabma serve: error: --workers {workers} with a SQLite audit trail "
            f"({settings.audit_url}): SQLite serves one process. Run one worker, or give the "
            "workers one PostgreSQL trail (IABMA_AUDIT_URL=postgresql+psycopg://...)",
            file=sys.stderr,
        )
        return 2
    import uvicorn

    uvicorn.run(
        FACTORY,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        access_log=False,
        timeout_graceful_shutdown=30,
    )
    return 0
